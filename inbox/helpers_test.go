package inbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"
)

// The tests here need no database: those that do (every settlement, claim and lease
// test, on SQLite, PostgreSQL and MySQL/MariaDB) are in internal/sqltest, a module of its
// own, so that the drivers stay out of this module.

// cols says which optional columns a test table has.
type cols struct {
	noAttempt, noGroup, noRetryAfter bool
}

// spec is the Table of a test table named name.
func (c cols) spec(name string) Table {
	t := Table{Name: name, ID: "id", Group: "name", Attempt: "attempt", RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload"}
	if c.noAttempt {
		t.Attempt = ""
	}
	if c.noGroup {
		t.Group = ""
	}
	if c.noRetryAfter {
		t.RetryAfter = ""
	}
	return t
}

// openEcho returns a *sql.DB on the echo driver, closed after the test.
func openEcho(t testing.TB) *sql.DB {
	db := sql.OpenDB(echoConnector{})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// echoConnector makes connections whose every query returns one row holding the query's
// arguments, as a driver returns column values: what a claim's scan reads, with no
// database. Anything else (Prepare, Begin, Exec) fails.
type echoConnector struct{}

func (echoConnector) Connect(context.Context) (driver.Conn, error) { return echoConn{}, nil }
func (echoConnector) Driver() driver.Driver                        { return echoDriver{} }

type echoDriver struct{}

func (echoDriver) Open(string) (driver.Conn, error) { return echoConn{}, nil }

type echoConn struct{}

var errEcho = errors.New("echo driver: only QueryContext is supported")

func (echoConn) Prepare(string) (driver.Stmt, error) { return nil, errEcho }
func (echoConn) Close() error                        { return nil }
func (echoConn) Begin() (driver.Tx, error)           { return nil, errEcho }

func (echoConn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	return &echoRows{vals: vals}, nil
}

type echoRows struct {
	vals []driver.Value
	done bool
}

func (r *echoRows) Columns() []string {
	names := make([]string, len(r.vals))
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	return names
}

func (r *echoRows) Close() error { return nil }

func (r *echoRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.vals)
	return nil
}
