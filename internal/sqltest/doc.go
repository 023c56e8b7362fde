// Package sqltest holds the SQL table inbox's tests that need a database: every
// settlement, crash and lease test of package inbox on SQLite (modernc.org/sqlite), and
// on PostgreSQL (pgx) and MySQL/MariaDB (go-sql-driver/mysql) when SETTLE_POSTGRES_URL
// and SETTLE_MYSQL_DSN are set. They use inbox's exported API only (an App mounting a
// Queue, and Queue.Transport for a bare claim), in a module of their own, so that the
// drivers stay out of the library module's go.mod and its users' go.sum. The inbox's
// tests of pure code stay in package inbox.
package sqltest
