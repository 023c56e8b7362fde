package soak

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"
)

// openInboxDB opens the worker's PostgreSQL database: with a crasher, through a driver
// wrapper that runs the inbox's settlement statements through it (see crashConn).
func openInboxDB(url string, c *crasher) (*sql.DB, error) {
	if c == nil {
		return sql.Open("pgx", url)
	}
	base, err := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(url)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(crashConnector{base: base, c: c}), nil
}

// sqlSettlement names an inbox statement of a settlement path ("" for any other: the
// lease extension, the column check, a publish) and says whether it is conditional (a
// claim, which runs on every poll and usually leases nothing; one that leased a row is
// numbered, a row whose lease passed getting one more attempt in it). Matched on the
// statement's text, lower-cased and unquoted, as dialect_postgres.go builds it for the
// soak's table (a group column named grp).
func sqlSettlement(query string) (name string, conditional bool) {
	q := strings.ToLower(strings.ReplaceAll(query, `"`, ""))
	switch {
	case strings.Contains(q, "for update skip locked"):
		return "sql_claim", true
	case strings.HasPrefix(q, "delete from "):
		return "sql_ack", false
	case strings.HasPrefix(q, "insert into "):
		return "sql_reply", false // a reply row (workers publish nothing else)
	case !strings.HasPrefix(q, "update "):
		return "", false
	case strings.Contains(q, " set grp = "):
		return "sql_dead_letter", false
	case strings.Contains(q, " set locked_until = null, retry_after = "):
		return "sql_park", false
	case strings.Contains(q, " set locked_until = null"):
		return "sql_put_back", false
	}
	return "", false
}

// crashConnector wraps the pgx connector: its connections are crashConns.
type crashConnector struct {
	base driver.Connector
	c    *crasher
}

func (k crashConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := k.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &crashConn{Conn: conn, c: k.c}, nil
}

func (k crashConnector) Driver() driver.Driver { return k.base.Driver() }

// crashConn runs each settlement statement (sqlSettlement) outside a transaction
// through the crasher: an Exec's "after" point comes once its result is back, a Query's
// once its rows were all read. Inside a transaction the statements are not points; the
// commit of a transaction that ran any is one, named "commit:" and their names, but for
// a claim's transaction, whose commit is the claim's conditional point (the soak's
// PostgreSQL settlement paths are single statements).
type crashConn struct {
	driver.Conn
	c  *crasher
	tx *crashTx // the open transaction
}

var (
	_ driver.ExecerContext      = (*crashConn)(nil)
	_ driver.QueryerContext     = (*crashConn)(nil)
	_ driver.ConnBeginTx        = (*crashConn)(nil)
	_ driver.ConnPrepareContext = (*crashConn)(nil)
	_ driver.NamedValueChecker  = (*crashConn)(nil)
	_ driver.SessionResetter    = (*crashConn)(nil)
	_ driver.Pinger             = (*crashConn)(nil)
)

func (k *crashConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := k.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	name, cond := sqlSettlement(query)
	if name == "" || k.tx != nil {
		if name != "" {
			k.tx.names = append(k.tx.names, name)
		}
		return e.ExecContext(ctx, query, args)
	}
	var res driver.Result
	err := k.c.call(name, cond, func() error {
		var err error
		res, err = e.ExecContext(ctx, query, args)
		return err
	}, func() bool {
		if res == nil {
			return false
		}
		n, err := res.RowsAffected()
		return err == nil && n > 0
	})
	return res, err
}

func (k *crashConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := k.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	name, cond := sqlSettlement(query)
	if name == "sql_claim" {
		k.c.reading()
	}
	if name == "" || k.tx != nil {
		if name != "" {
			k.tx.names = append(k.tx.names, name)
		}
		return q.QueryContext(ctx, query, args)
	}
	n := 0
	if !cond {
		n = k.c.before(name)
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		if !cond {
			k.c.after(name, n)
		}
		return nil, err
	}
	return &crashRows{Rows: rows, c: k.c, cond: cond, k: n, name: name}, nil
}

func (k *crashConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := k.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return k.Conn.Prepare(query)
}

func (k *crashConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := k.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("crash conn: the driver has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	k.tx = &crashTx{Tx: tx, conn: k}
	return k.tx, nil
}

func (k *crashConn) CheckNamedValue(v *driver.NamedValue) error {
	if c, ok := k.Conn.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (k *crashConn) ResetSession(ctx context.Context) error {
	if r, ok := k.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (k *crashConn) Ping(ctx context.Context) error {
	if p, ok := k.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// crashTx is a transaction of a crashConn: its commit is a point when it ran
// settlement statements.
type crashTx struct {
	driver.Tx
	conn  *crashConn
	names []string
}

func (x *crashTx) Commit() error {
	x.conn.tx = nil
	switch {
	case len(x.names) == 0:
		return x.Tx.Commit()
	case allClaims(x.names):
		// A claim in a transaction of its own (PostgreSQL's) commits only when it leased
		// rows: the point after its commit is the claim's, as an autocommitted claim's
		// was once its rows were read.
		return x.conn.c.call("sql_claim", true, x.Tx.Commit, func() bool { return true })
	}
	return x.conn.c.call("commit:"+strings.Join(x.names, "+"), false, x.Tx.Commit, nil)
}

// allClaims reports whether a transaction's settlement statements are all claims.
func allClaims(names []string) bool {
	for _, n := range names {
		if n != "sql_claim" {
			return false
		}
	}
	return true
}

func (x *crashTx) Rollback() error {
	x.conn.tx = nil
	return x.Tx.Rollback()
}

// crashRows are the rows of a settlement query: its "after" point comes once they were
// all read (or closed), for a conditional one only if there was a row.
type crashRows struct {
	driver.Rows
	c    *crasher
	cond bool
	done bool
	k    int // the call's number (unconditional)
	n    int // rows read
	name string
}

func (r *crashRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	switch {
	case err == nil:
		r.n++
	case errors.Is(err, io.EOF):
		r.finish()
	}
	return err
}

func (r *crashRows) Close() error {
	r.finish()
	return r.Rows.Close()
}

func (r *crashRows) finish() {
	if r.done {
		return
	}
	r.done = true
	if !r.cond || r.n > 0 {
		r.c.after(r.name, r.k)
	}
}
