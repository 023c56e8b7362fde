package sqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/faults"
	"github.com/settlekit/settle/internal/sourcetest"
)

// outage is a database the test can take down and bring back: a pool through a proxy
// that cuts every connection and refuses new ones (PostgreSQL, MySQL), or a SQLite file
// opened through a driver that fails every statement while down.
type outage struct {
	db   *sql.DB // the pool that suffers the outage
	down func()  // takes the database away from db
	up   func()  // brings it back
}

// setupOutage returns a test bundle on a table of b (read and written by the test
// through x.db, which no outage touches) and the outage of a pool of its own.
func setupOutage(t *testing.T, b backend) (*testBundle, outage) {
	t.Helper()
	if b.d != inbox.SQLite {
		x := setup(t, b, cols{})
		pdb, p := proxied(t, b)
		return x, outage{db: pdb, down: func() { cutAndRefuse(p) }, up: func() { p.Refuse(0) }}
	}
	dsn := "file:" + filepath.Join(t.TempDir(), "inbox.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	db := openPool(t, "sqlite", dsn)
	tb := createTable(t, b, db, cols{})
	x := &testBundle{b: b, clock: newFakeClock(), db: db, ib: inbox.New(db, b.d, tb), rec: sourcetest.NewRecorder(), tb: tb}
	var isDown atomic.Bool
	fdb := sql.OpenDB(downConnector{dsn: dsn, base: db.Driver(), down: &isDown})
	t.Cleanup(func() { _ = fdb.Close() })
	return x, outage{db: fdb, down: func() { isDown.Store(true) }, up: func() { isDown.Store(false) }}
}

// cutAndRefuse cuts every connection through p and refuses new ones until p.Refuse(0).
func cutAndRefuse(p *faults.Proxy) {
	p.Refuse(1 << 62)
	p.ResetAll()
}

// errDown is what every statement through a downConnector fails with while down.
var errDown = errors.New("sqltest: the database is down")

// downConnector opens connections of base on dsn that fail every statement while down.
type downConnector struct {
	base driver.Driver
	down *atomic.Bool
	dsn  string
}

func (c downConnector) Connect(context.Context) (driver.Conn, error) {
	if c.down.Load() {
		return nil, errDown
	}
	conn, err := c.base.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &downConn{Conn: conn, down: c.down}, nil
}

func (c downConnector) Driver() driver.Driver { return c.base }

// downConn passes every call to its connection, failing each while down.
type downConn struct {
	driver.Conn
	down *atomic.Bool
}

var (
	_ driver.ExecerContext      = (*downConn)(nil)
	_ driver.QueryerContext     = (*downConn)(nil)
	_ driver.ConnBeginTx        = (*downConn)(nil)
	_ driver.ConnPrepareContext = (*downConn)(nil)
	_ driver.NamedValueChecker  = (*downConn)(nil)
)

func (k *downConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := k.Conn.(driver.ExecerContext)
	switch {
	case !ok:
		return nil, driver.ErrSkip
	case k.down.Load():
		return nil, errDown
	}
	return e.ExecContext(ctx, query, args)
}

func (k *downConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := k.Conn.(driver.QueryerContext)
	switch {
	case !ok:
		return nil, driver.ErrSkip
	case k.down.Load():
		return nil, errDown
	}
	return q.QueryContext(ctx, query, args)
}

func (k *downConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if k.down.Load() {
		return nil, errDown
	}
	if b, ok := k.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return k.Conn.Begin() // the fallback database/sql itself uses
}

func (k *downConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if k.down.Load() {
		return nil, errDown
	}
	if p, ok := k.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return k.Conn.Prepare(query)
}

func (k *downConn) CheckNamedValue(v *driver.NamedValue) error {
	if c, ok := k.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(v)
	}
	return driver.ErrSkip
}
