package examplerun

import (
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle/inbox"
)

func TestOpenSQLPicksTheDialectFromTheDriverOrTheDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, driver, dsn string
		want              inbox.Dialect
	}{
		{name: "EmptyIsSQLite", want: inbox.SQLite},
		{name: "FileIsSQLite", dsn: "file:/tmp/x.db", want: inbox.SQLite},
		{name: "PostgresURL", dsn: "postgres://root@127.0.0.1:5432/test", want: inbox.Postgres},
		{name: "PostgresqlURL", dsn: "postgresql://root@127.0.0.1:5432/test", want: inbox.Postgres},
		{name: "OtherIsMySQL", dsn: "root@tcp(127.0.0.1:3306)/test", want: inbox.MySQL},
		{name: "DriverWins", driver: "mysql", dsn: "root@tcp(127.0.0.1:3306)/x.db", want: inbox.MySQL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, d, err := OpenSQL(tt.driver, tt.dsn, "settle-examplerun-test.db")
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			if d != tt.want {
				t.Fatalf("dialect %v, want %v", d, tt.want)
			}
		})
	}
	if _, _, err := OpenSQL("oracle", "x", ""); err == nil {
		t.Fatal("an unknown driver was accepted")
	}
}
