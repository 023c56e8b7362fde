package inbox

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

	"github.com/settlekit/settle/internal/clock"
)

// backend is one database the tests run on.
type backend struct {
	d    Dialect
	name string
	open func(t testing.TB) *sql.DB
}

// backends returns SQLite always, and Postgres and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set.
func backends() []backend {
	bs := []backend{{d: SQLite, name: "SQLite", open: openSQLite}}
	if url := os.Getenv("SETTLE_POSTGRES_URL"); url != "" {
		bs = append(bs, backend{d: Postgres, name: "Postgres", open: sharedDB("pgx", url)})
	}
	if dsn := os.Getenv("SETTLE_MYSQL_DSN"); dsn != "" {
		bs = append(bs, backend{d: MySQL, name: "MySQL", open: sharedDB("mysql", mysqlDSN(dsn))})
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

// uniqueName returns a table name no other test uses.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// createTable creates a uniquely named table with the columns c and drops it after
// the test.
func createTable(t testing.TB, b backend, db *sql.DB, c cols) Table {
	t.Helper()
	name := uniqueName("settle_inbox")
	createNamed(t, b, db, c, name)
	return c.spec(name)
}

func createNamed(t testing.TB, b backend, db *sql.DB, c cols, name string) {
	t.Helper()
	var parts []string
	switch b.d {
	case SQLite:
		parts = append(parts, "id INTEGER PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name TEXT NOT NULL DEFAULT ''")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt INTEGER NOT NULL DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))")
		}
		parts = append(parts, "locked_until TEXT", "payload BLOB NOT NULL")
	case Postgres:
		parts = append(parts, "id BIGSERIAL PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name TEXT NOT NULL DEFAULT ''")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt SMALLINT NOT NULL DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after TIMESTAMPTZ NOT NULL DEFAULT now()")
		}
		parts = append(parts, "locked_until TIMESTAMPTZ", "payload BYTEA NOT NULL")
	case MySQL:
		parts = append(parts, "id BIGINT AUTO_INCREMENT PRIMARY KEY")
		if !c.noGroup {
			parts = append(parts, "name VARCHAR(191) NOT NULL DEFAULT ''", "KEY (name)")
		}
		if !c.noAttempt {
			parts = append(parts, "attempt SMALLINT NOT NULL DEFAULT 1")
		}
		if !c.noRetryAfter {
			parts = append(parts, "retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)")
		}
		parts = append(parts, "locked_until DATETIME(6) NULL", "payload LONGBLOB NOT NULL")
	}
	q := quoteFor(b.d)
	ddl := fmt.Sprintf("CREATE TABLE %s (%s)", q(name), strings.Join(parts, ", "))
	if _, err := db.ExecContext(context.Background(), ddl); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP TABLE "+q(name)); err != nil {
			t.Errorf("drop table %s: %v", name, err)
		}
	})
}

func quoteFor(d Dialect) func(string) string {
	if d == MySQL {
		return func(s string) string { return "`" + s + "`" }
	}
	return func(s string) string { return `"` + s + `"` }
}

// row is one row as the tests read it back.
type row struct {
	attempt int
	group   string
	leased  bool
	payload string
}

// readRows returns the rows of table by id order.
func readRows(t testing.TB, b backend, db *sql.DB, tb Table) []row {
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

// waitTimers waits until at least n timers are waiting.
func (c *fakeClock) waitTimers(t testing.TB, n int) {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		waiting := 0
		for _, ft := range c.timers {
			if !ft.fired {
				waiting++
			}
		}
		added := c.added
		c.mu.Unlock()
		if waiting >= n {
			return
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d timers", n)
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
	ft := &fakeTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
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
