package sqltest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/faults"
	"github.com/settlekit/settle/internal/source"
)

func TestOpenNamesEveryMissingColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noRetryAfter: true, noAttempt: true})
		spec := cols{}.spec(tb.Name) // names attempt and retry_after, which the table lacks
		spec.Payload = "body"
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, spec).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		err := app.Run(context.Background())
		if err == nil {
			t.Fatal("Run: got nil, want the missing columns")
		}
		for _, col := range []string{"attempt", "retry_after", "body"} {
			if !strings.Contains(err.Error(), col) {
				t.Errorf("Run: got %q, want it to name column %s", err, col)
			}
		}
	})
}

func TestOpenChecksTheDeadLetterTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noGroup: true})
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, tb).Queue(""), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
			settle.MaxAttempts(2), settle.DeadLetter(tb.Name+"_missing"))
		err := app.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tb.Name+"_missing") {
			t.Fatalf("Run: got %v, want an error naming the missing dead-letter table", err)
		}
	})
}

// TestOpenRefusesSQLiteTimeColumnsNotInTheTextForm: a SQLite time column whose values
// would not compare in time order with the inbox's text times stops the App at Run,
// naming the column and the form it needs: a DEFAULT CURRENT_TIMESTAMP (which writes
// '2026-12-01 09:44:00', so a row parked for an hour would be due at once), a numeric
// declared type, a DEFAULT writing a number, and a value already in the table.
func TestOpenRefusesSQLiteTimeColumnsNotInTheTextForm(t *testing.T) {
	t.Parallel()
	b := backends()[0] // SQLite: the other dialects' time columns have a time type
	for _, tc := range []struct {
		name       string
		retryAfter string // its column definition
		lease      string
		insert     string // a row the service inserted, if any
		want       []string
	}{
		{name: "DefaultCurrentTimestamp", retryAfter: "DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP", lease: "TEXT",
			want: []string{"column retry_after", "DEFAULT CURRENT_TIMESTAMP writes '2", "strftime('%Y-%m-%dT%H:%M:%f+00:00')", "DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))"}},
		{name: "DefaultDatetimeNow", retryAfter: "TEXT DEFAULT (datetime('now'))", lease: "TEXT",
			want: []string{"column retry_after", "datetime('now')", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
		{name: "IntegerLease", retryAfter: "TEXT", lease: "INTEGER",
			want: []string{"column locked_until is declared INTEGER", "as numbers", "declare it TEXT"}},
		{name: "DefaultUnixEpoch", retryAfter: "NUMERIC DEFAULT (unixepoch())", lease: "TEXT",
			want: []string{"column retry_after", "writes the number", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
		{name: "ValueInAnotherForm", retryAfter: "TEXT", lease: "TEXT",
			insert: `INSERT INTO %s (name, retry_after, payload) VALUES ('jobs', '2026-12-01 10:44:00', x'00')`,
			want:   []string{"column retry_after holds '2026-12-01 10:44:00' (row 1", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			name := uniqueName("settle_inbox")
			ddl := fmt.Sprintf(`CREATE TABLE %q (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', attempt INTEGER NOT NULL DEFAULT 1, retry_after %s, locked_until %s, payload BLOB NOT NULL)`,
				name, tc.retryAfter, tc.lease)
			if _, err := db.ExecContext(context.Background(), ddl); err != nil {
				t.Fatalf("create table: %v", err)
			}
			if tc.insert != "" {
				if _, err := db.ExecContext(context.Background(), fmt.Sprintf(tc.insert, fmt.Sprintf("%q", name))); err != nil {
					t.Fatalf("insert: %v", err)
				}
			}
			app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
			app.Mount(inbox.New(db, b.d, cols{}.spec(name)).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
			err := app.Run(context.Background())
			if err == nil {
				t.Fatal("Run: got nil, want the time column refused")
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run: got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestOpenAcceptsSQLiteTimeColumnsInTheTextForm: the documented schema (TEXT columns,
// retry_after defaulting to strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')) holding rows in
// every state the inbox writes (parked, leased, due) opens, and its due row is handled.
func TestOpenAcceptsSQLiteTimeColumnsInTheTextForm(t *testing.T) {
	t.Parallel()
	x := setup(t, backends()[0], cols{})
	x.publish(t, "jobs", "parked", "leased", "due")
	tr := probe(t, x.ib.Queue("jobs"), nil)
	ds, err := tr.Fetch(context.Background(), 10, 0)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: got %d rows, err %v; want 3", len(ds), err)
	}
	p := byPayload(ds) // "leased" stays leased to the probe, a worker that crashed
	if err := errors.Join(tr.Moves(context.Background(), []source.Move{
		{Action: source.ActionPark, Delivery: p["parked"], Delay: time.Hour},
		{Action: source.ActionRelease, Delivery: p["due"]},
	})...); err != nil {
		t.Fatalf("park and release: %v", err)
	}
	x.run(t, x.ib.Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(context.Context, *settle.Message) error { return nil }))
	evs := x.rec.WaitFor(t, waitLong, "the due row's ack", finals(1))
	if evs[0].Action != settle.ActionAck || evs[0].Err != nil {
		t.Fatalf("got %+v, want the due row acked", evs)
	}
}

// openLog is a slog.Handler keeping the error of each "open failed" line the engine logs
// before it tries Open again.
type openLog struct {
	mu    sync.Mutex
	errs  []string
	added chan struct{} // closed and replaced at each line
}

func newOpenLog() *openLog { return &openLog{added: make(chan struct{})} }

func (l *openLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *openLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "open failed") {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var text string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			text = a.Value.String()
		}
		return true
	})
	l.errs = append(l.errs, r.Message+": "+text)
	close(l.added)
	l.added = make(chan struct{})
	return nil
}

func (l *openLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *openLog) WithGroup(string) slog.Handler      { return l }

// wait waits until n lines were logged and returns them.
func (l *openLog) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		errs, added := append([]string(nil), l.errs...), l.added
		l.mu.Unlock()
		if len(errs) >= n {
			return errs
		}
		select {
		case <-added:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d open-failed lines; got %q", n, errs)
		}
	}
}

// openedApp runs an App on db whose one mount reads group jobs of table tb, logging to
// logs; delivered is closed at the first delivery, and Run's error is sent on ran.
func openedApp(t *testing.T, b backend, db *sql.DB, tb inbox.Table, logs slog.Handler) (delivered <-chan struct{}, ran <-chan error) {
	t.Helper()
	app, err := settle.New(settle.Config{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	var once sync.Once
	app.Mount(inbox.New(db, b.d, tb).Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(context.Context, *settle.Message) error {
		once.Do(func() { close(got) })
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc, returned := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(returned)
		errc <- app.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(waitLong):
			t.Error("Run did not return after the test")
		}
	})
	return got, errc
}

// awaitDelivery waits for the App's first delivery, failing the test if Run returned.
func awaitDelivery(t *testing.T, delivered <-chan struct{}, ran <-chan error) {
	t.Helper()
	select {
	case <-delivered:
	case err := <-ran:
		t.Fatalf("Run returned %v, want it to open once the fault passed and deliver the row", err)
	case <-time.After(waitLong):
		t.Fatal("timed out waiting for the row to be delivered")
	}
}

// TestOpenRetriesATransientErrorAndStopsAtAConfigurationError: an error of Open that a
// later try may not meet is logged and Open tried again after a backoff, as when the
// server is unreachable, and the App then delivers the table's row: a connection killed
// while Open reads the attempt column's type (MySQL/MariaDB: the connection cut right
// after the server answered, the driver's "invalid connection", which used to stop Run
// with 300 rows untouched; PostgreSQL: its backend terminated, SQLSTATE 57P01),
// connections reset as soon as they are made, and on SQLite a database another
// connection holds locked (SQLITE_BUSY). A table that does not exist still stops Run at
// once, with no retry.
func TestOpenRetriesATransientErrorAndStopsAtAConfigurationError(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.d != inbox.SQLite {
			t.Run("KilledWhileReadingTheAttemptColumn", func(t *testing.T) {
				t.Parallel()
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				p := faults.Start(t, serverAddr(t, b))
				logs := newOpenLog()
				var pdb *sql.DB
				var killed <-chan struct{}
				if b.d == inbox.MySQL {
					pdb = throughProxy(t, b, p)
					rule := &faults.Rule{Request: func(req []byte) bool { return bytes.Contains(req, []byte("information_schema.COLUMNS")) }, Teardown: faults.Close}
					p.CutReply(rule)
					killed = rule.Done()
				} else {
					pdb, killed = terminateOnRequest(t, x.db, p, []byte("pg_attribute"))
				}
				delivered, ran := openedApp(t, b, pdb, x.tb, logs)
				select {
				case <-killed:
				case err := <-ran:
					t.Fatalf("Run returned %v before the connection was killed", err)
				}
				awaitDelivery(t, delivered, ran)
				lines := logs.wait(t, 1)
				t.Logf("logged: %q", lines)
				if !strings.Contains(lines[0], x.tb.Name) || !strings.Contains(lines[0], "attempt column") {
					t.Errorf("logged %q, want the table and the check that failed named", lines[0])
				}
			})
			t.Run("Refused", func(t *testing.T) {
				t.Parallel()
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				p := faults.Start(t, serverAddr(t, b))
				pdb := throughProxy(t, b, p)
				p.Refuse(1 << 62)
				logs := newOpenLog()
				delivered, ran := openedApp(t, b, pdb, x.tb, logs)
				select {
				case <-waitLines(logs, 2):
				case err := <-ran:
					t.Fatalf("Run returned %v while connections were refused, want it to try again", err)
				}
				p.Refuse(0)
				awaitDelivery(t, delivered, ran)
				t.Logf("logged: %q", logs.wait(t, 2)[:2])
			})
		} else {
			t.Run("Locked", func(t *testing.T) {
				t.Parallel()
				// A rollback journal (not WAL): a writer's EXCLUSIVE lock keeps readers out.
				dsn := "file:" + filepath.Join(t.TempDir(), "inbox.db") + "?_pragma=busy_timeout(20)"
				db := openPool(t, "sqlite", dsn)
				tb := createTable(t, b, db, cols{})
				if _, err := inbox.New(db, b.d, tb).PublishBytes(context.Background(), "jobs", []byte("p")); err != nil {
					t.Fatal(err)
				}
				holder, err := openPool(t, "sqlite", dsn).Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Close()
				if _, err := holder.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
					t.Fatalf("lock the database: %v", err)
				}
				logs := newOpenLog()
				delivered, ran := openedApp(t, b, openPool(t, "sqlite", dsn), tb, logs)
				select {
				case <-waitLines(logs, 2):
				case err := <-ran:
					t.Fatalf("Run returned %v while the database was locked, want it to try again", err)
				}
				if _, err := holder.ExecContext(context.Background(), "COMMIT"); err != nil {
					t.Fatalf("unlock the database: %v", err)
				}
				awaitDelivery(t, delivered, ran)
				t.Logf("logged: %q", logs.wait(t, 2)[:2])
			})
		}
		t.Run("MissingTableStopsRunAtOnce", func(t *testing.T) {
			t.Parallel()
			logs := newOpenLog()
			_, ran := openedApp(t, b, b.open(t), cols{}.spec(uniqueName("settle_inbox_missing")), logs)
			select {
			case err := <-ran:
				if err == nil || !strings.Contains(err.Error(), "settle_inbox_missing") {
					t.Fatalf("Run returned %v, want an error naming the missing table", err)
				}
			case <-time.After(waitLong):
				t.Fatal("Run kept trying to open a table that does not exist")
			}
			logs.mu.Lock()
			defer logs.mu.Unlock()
			if len(logs.errs) != 0 {
				t.Errorf("logged %q, want no retry", logs.errs)
			}
		})
	})
}

// waitLines returns a channel closed once logs holds n lines.
func waitLines(logs *openLog, n int) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			logs.mu.Lock()
			got, added := len(logs.errs), logs.added
			logs.mu.Unlock()
			if got >= n {
				return
			}
			<-added
		}
	}()
	return ch
}

// terminateOnRequest returns a pool on PostgreSQL through p whose connections carry an
// application_name of their own, and a channel closed once the first request of the
// pool containing what was seen (the proxy holds it back meanwhile) and every backend of
// the pool terminated with pg_terminate_backend on db: the request is answered by the
// backend's FATAL 57P01, as a connection an operator or a failover killed.
func terminateOnRequest(t *testing.T, db *sql.DB, p *faults.Proxy, what []byte) (*sql.DB, <-chan struct{}) {
	t.Helper()
	u, err := url.Parse(os.Getenv("SETTLE_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName("settle_open")
	u.Host = p.Addr()
	qs := u.Query()
	qs.Set("application_name", name)
	u.RawQuery = qs.Encode()
	pdb := openPool(t, "pgx", u.String())
	done := make(chan struct{})
	seen := p.Observe(func(req []byte) bool { return bytes.Contains(req, what) })
	p.SetLatency(faults.ToServer, 2*time.Second) // the termination's time, on a loaded machine
	go func() {
		defer close(done)
		<-seen
		if _, err := db.ExecContext(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, name); err != nil {
			t.Errorf("terminate: %v", err)
		}
		p.SetLatency(faults.ToServer, 0)
	}()
	return pdb, done
}
