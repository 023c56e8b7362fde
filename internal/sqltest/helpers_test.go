package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// backend is one database the tests run on.
type backend struct {
	d    inbox.Dialect
	name string
	open func(t testing.TB) *sql.DB
}

// backends returns SQLite always, and Postgres and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set.
func backends() []backend {
	bs := []backend{{d: inbox.SQLite, name: "SQLite", open: openSQLite}}
	if url := os.Getenv("SETTLE_POSTGRES_URL"); url != "" {
		bs = append(bs, backend{d: inbox.Postgres, name: "Postgres", open: sharedDB("pgx", url)})
	}
	if dsn := os.Getenv("SETTLE_MYSQL_DSN"); dsn != "" {
		bs = append(bs, backend{d: inbox.MySQL, name: "MySQL", open: sharedDB("mysql", mysqlDSN(dsn))})
	}
	return bs
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// mysqlDSN adds what the tests need: time.Time scanning and a UTC session.
func mysqlDSN(dsn string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	if !strings.Contains(dsn, "parseTime") {
		dsn += sep + "parseTime=true"
		sep = "&"
	}
	if !strings.Contains(dsn, "time_zone") {
		dsn += sep + "time_zone=%27%2B00%3A00%27"
	}
	return dsn
}

func openSQLite(t testing.TB) *sql.DB {
	path := filepath.Join(t.TempDir(), "inbox.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var (
	sharedMu  sync.Mutex
	sharedDBs = map[string]*sql.DB{}
)

// sharedDB opens one pool per server for the whole test binary.
func sharedDB(driver, dsn string) func(t testing.TB) *sql.DB {
	return func(t testing.TB) *sql.DB {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		if db, ok := sharedDBs[dsn]; ok {
			return db
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatalf("open %s: %v", driver, err)
		}
		db.SetMaxOpenConns(40)
		if err := db.PingContext(context.Background()); err != nil {
			t.Fatalf("ping %s: %v", driver, err)
		}
		sharedDBs[dsn] = db
		return db
	}
}

// cols says which optional columns a test table has, and whether it lacks the index the
// README recommends.
type cols struct {
	noAttempt, noGroup, noRetryAfter, noDueIndex bool
	why                                          bool // last_error and dead_at columns
	headers                                      bool // a headers column (JSON: text, jsonb, JSON)
	nullAttempt                                  bool // an attempt column without NOT NULL
}

// spec is the Table of a test table named name.
func (c cols) spec(name string) inbox.Table {
	t := inbox.Table{Name: name, ID: "id", Group: "name", Attempt: "attempt", RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload"}
	if c.noAttempt {
		t.Attempt = ""
	}
	if c.noGroup {
		t.Group = ""
	}
	if c.noRetryAfter {
		t.RetryAfter = ""
	}
	if c.why {
		t.LastError, t.DeadAt = "last_error", "dead_at"
	}
	if c.headers {
		t.Headers = "headers"
	}
	return t
}

// uniqueName returns a table name no other test uses.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// createTable creates a uniquely named table with the columns c and drops it after
// the test.
func createTable(t testing.TB, b backend, db *sql.DB, c cols) inbox.Table {
	t.Helper()
	name := uniqueName("settle_inbox")
	createNamed(t, b, db, c, name)
	return c.spec(name)
}

func createNamed(t testing.TB, b backend, db *sql.DB, c cols, name string) {
	t.Helper()
	var parts []string
	notNull := " NOT NULL"
	if c.nullAttempt {
		notNull = ""
	}
	switch b.d {
	case inbox.SQLite:
		parts = append(parts, "id INTEGER PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name TEXT NOT NULL DEFAULT ''")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt INTEGER"+notNull+" DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))")
		}
		parts = append(parts, "locked_until TEXT", "payload BLOB NOT NULL")
		if c.why {
			parts = append(parts, "last_error TEXT", "dead_at TEXT")
		}
		if c.headers {
			parts = append(parts, "headers TEXT")
		}
	case inbox.Postgres:
		parts = append(parts, "id BIGSERIAL PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name TEXT NOT NULL DEFAULT ''")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt SMALLINT"+notNull+" DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after TIMESTAMPTZ NOT NULL DEFAULT now()")
		}
		parts = append(parts, "locked_until TIMESTAMPTZ", "payload BYTEA NOT NULL")
		if c.why {
			parts = append(parts, "last_error TEXT", "dead_at TIMESTAMPTZ")
		}
		if c.headers {
			parts = append(parts, "headers JSONB")
		}
	case inbox.MySQL:
		parts = append(parts, "id BIGINT AUTO_INCREMENT PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name VARCHAR(191) NOT NULL DEFAULT ''")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt SMALLINT"+notNull+" DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)")
		}
		parts = append(parts, "locked_until DATETIME(6) NULL", "payload LONGBLOB NOT NULL")
		if c.why {
			parts = append(parts, "last_error TEXT", "dead_at DATETIME(6) NULL")
		}
		if c.headers {
			parts = append(parts, "headers JSON NULL")
		}
	}
	q := quoteFor(b.d)
	ddl := fmt.Sprintf("CREATE TABLE %s (%s)", q(name), strings.Join(parts, ", "))
	if _, err := db.ExecContext(context.Background(), ddl); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if !c.noDueIndex && !c.noRetryAfter {
		// The index the README's schema recommends: claims walk it in due order.
		due := "retry_after, id"
		if !c.noGroup {
			due = "name, " + due
		}
		index := fmt.Sprintf("CREATE INDEX %s ON %s (%s)", q(name+"_due"), q(name), due)
		if _, err := db.ExecContext(context.Background(), index); err != nil {
			t.Fatalf("create index: %v", err)
		}
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP TABLE "+q(name)); err != nil {
			t.Errorf("drop table %s: %v", name, err)
		}
	})
}

func quoteFor(d inbox.Dialect) func(string) string {
	if d == inbox.MySQL {
		return func(s string) string { return "`" + s + "`" }
	}
	return func(s string) string { return `"` + s + `"` }
}

// placeholder is the dialect's n-th (1-based) statement argument.
func placeholder(d inbox.Dialect, n int) string {
	if d == inbox.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// row is one row as the tests read it back.
type row struct {
	attempt int
	group   string
	leased  bool
	payload string
}

// readRows returns the rows of table by id order.
func readRows(t testing.TB, b backend, db *sql.DB, tb inbox.Table) []row {
	t.Helper()
	q := quoteFor(b.d)
	group, attempt := "''", "1"
	if tb.Group != "" {
		group = q(tb.Group)
	}
	if tb.Attempt != "" {
		attempt = q(tb.Attempt)
	}
	rows, err := db.QueryContext(context.Background(), fmt.Sprintf("SELECT %s, %s, %s IS NOT NULL, %s FROM %s ORDER BY %s",
		group, attempt, q(tb.LockedUntil), q(tb.Payload), q(tb.Name), q(tb.ID)))
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		var payload []byte
		if err := rows.Scan(&r.group, &r.attempt, &r.leased, &payload); err != nil {
			t.Fatalf("scan row: %v", err)
		}
		r.payload = string(payload)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read rows: %v", err)
	}
	return out
}

// column returns the first column of every row query selects, as the driver reads it
// (bytes as a string).
func column(t testing.TB, db *sql.DB, query string, args ...any) []any {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []any
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		if bs, ok := v.([]byte); ok {
			v = string(bs)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// eventually waits until cond holds, for what nothing outside the inbox signals (a
// heartbeat's write, a LISTEN connection): it asks again every few milliseconds, for at
// most waitLong.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", waitLong, what)
		}
	}
}

// leases returns the lease column of the table's rows by id order, as the driver reads
// it.
func leases(t testing.TB, b backend, db *sql.DB, tb inbox.Table) []string {
	t.Helper()
	q := quoteFor(b.d)
	var out []string
	for _, v := range column(t, db, fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", q(tb.LockedUntil), q(tb.Name), q(tb.ID))) {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// waitLeasesMoved waits until every lease of the table's rows differs from before (the
// same rows, by id order): a heartbeat has written them all.
func waitLeasesMoved(t testing.TB, b backend, db *sql.DB, tb inbox.Table, before []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("the leases %v to be extended", before), func() bool {
		now := leases(t, b, db, tb)
		moved := len(now) == len(before)
		for i := range now {
			moved = moved && now[i] != before[i]
		}
		return moved
	})
}

// probe opens a bare transport of q, for a claim outside any App: a claim that finds
// nothing, or a worker that claims rows and crashes. Its "now" follows the test clock
// (as an App's queue on that clock would), but its heartbeat runs on a clock of its own
// that never moves, so it never extends a lease: what it claims stays leased, unsettled,
// until the lease passes. It is closed after the test.
func probe(t testing.TB, q *inbox.Queue, testClock clock.Clock) source.Transport {
	t.Helper()
	p := source.Policy{}
	tr := q.Transport(source.Env{Clock: newFakeClock(), Logger: quietLogger(t), Mount: "probe", Policy: p, TestClock: testClock})
	if errs := tr.Validate(p); len(errs) > 0 {
		t.Fatalf("validate: %v", errs)
	}
	if err := tr.Open(context.Background()); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

// claim claims up to 10 due rows of q through a probe, as a worker that then crashes:
// nothing settles them and no heartbeat extends their leases.
func claim(t testing.TB, q *inbox.Queue, testClock clock.Clock) []*source.Delivery {
	t.Helper()
	ds, err := probe(t, q, testClock).Fetch(context.Background(), 10, 0)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return ds
}

// fakeClock is a paused clock that moves only on Advance.
type fakeClock struct {
	mu     sync.Mutex
	added  chan struct{} // closed and replaced when a timer is made
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{added: make(chan struct{}), now: time.Now().UTC().Truncate(time.Millisecond)}
}

// waitTimer waits until a timer made for d waits on the clock (a queue's heartbeat waits
// a third of its lease).
func (c *fakeClock) waitTimer(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		found := false
		for _, ft := range c.timers {
			if !ft.fired && ft.d == d {
				found = true
			}
		}
		added := c.added
		c.mu.Unlock()
		if found {
			return
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("timed out waiting for a timer of %s", d)
		}
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d), d: d}
	if d <= 0 {
		ft.ch <- c.now
		ft.fired = true
		return ft
	}
	c.timers = append(c.timers, ft)
	close(c.added)
	c.added = make(chan struct{})
	return ft
}

// Advance moves the clock by d and fires the timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, ft := range c.timers {
		if !ft.fired && !ft.at.After(c.now) {
			ft.fired = true
			ft.ch <- c.now
			continue
		}
		if !ft.fired {
			kept = append(kept, ft)
		}
	}
	c.timers = kept
}

type fakeTimer struct {
	at    time.Time
	c     *fakeClock
	ch    chan time.Time
	d     time.Duration
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.fired
	t.fired = true
	return was
}

// quietLogger discards logs unless -v.
func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
