package examplerun

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/settlekit/settle/inbox"
)

// OpenSQL opens the database a DSN names and returns its inbox dialect. driver names it
// (sqlite, postgres or pgx, mysql or mariadb); empty, the DSN's form does (postgres:// or
// postgresql://: PostgreSQL; file: or a .db/.sqlite path: SQLite; anything else:
// MySQL/MariaDB). An empty DSN is the SQLite file sqliteFile in the temp directory. The
// example program imports the drivers (modernc.org/sqlite, pgx stdlib,
// go-sql-driver/mysql).
func OpenSQL(driver, dsn, sqliteFile string) (*sql.DB, inbox.Dialect, error) {
	if driver == "" {
		switch {
		case dsn == "", strings.HasPrefix(dsn, "file:"), strings.HasSuffix(dsn, ".db"), strings.HasSuffix(dsn, ".sqlite"):
			driver = "sqlite"
		case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
			driver = "postgres"
		default:
			driver = "mysql"
		}
	}
	switch driver {
	case "sqlite":
		if dsn == "" {
			dsn = "file:" + filepath.Join(os.TempDir(), sqliteFile)
		}
		if !strings.Contains(dsn, "_pragma") {
			dsn += sep(dsn) + "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
		}
		db, err := sql.Open("sqlite", dsn)
		return db, inbox.SQLite, err
	case "postgres", "pgx":
		db, err := sql.Open("pgx", dsn)
		return db, inbox.Postgres, err
	case "mysql", "mariadb":
		if !strings.Contains(dsn, "parseTime") {
			dsn += sep(dsn) + "parseTime=true"
		}
		db, err := sql.Open("mysql", dsn)
		return db, inbox.MySQL, err
	default:
		return nil, nil, fmt.Errorf("-driver %q: want sqlite, postgres or mysql", driver)
	}
}

// sep is the separator before one more DSN parameter.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
