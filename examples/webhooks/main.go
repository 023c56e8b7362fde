// Command webhooks is the webhook service of seed 003, "retry_after" on a SQL table
// inbox: it posts webhook calls to an endpoint that answers in one of four ways, and
// settles each answer differently:
//
//   - 200 OK: the call went through; the row is deleted (ack).
//   - 429 Too Many Requests, with a Retry-After header: the row waits as long as the
//     endpoint asked (settle.RetryAfter: its retry_after column holds now + the wait,
//     so it waits in the table, with no timer in the service and nothing lost if the
//     process stops).
//   - 5xx: the endpoint failed; the call is tried again at once (settle.Retry).
//   - 410 Gone: the endpoint was removed, and asking again gets the same answer; the
//     call is dropped with a warning (settle.Drop).
//
// A call gets five deliveries, the first included (settle.MaxAttempts(5)); a delayed
// retry counts against the cap as an immediate one does. The seed's table has no cap;
// here the fifth failure moves the row into the dead-letter table webhook_jobs_dead
// (webhook_jobs has no group column, so dead letters go to a table of the same columns:
// insert + delete in one transaction; one statement on Postgres).
//
// The endpoint answers Retry-After in seconds, as HTTP does; -second sets how long one
// of those seconds lasts here (the seed waits a real minute; the demo far less, so it
// ends quickly).
//
// It runs on an embedded SQLite file by default; -dsn points it at Postgres
// (postgres://…), MySQL/MariaDB (user@tcp(host:port)/db) or another SQLite file
// (file:path.db), and -driver names the driver when the DSN's form does not. It creates
// both tables if missing, publishes -n calls, runs until each is settled, and prints as
// its last line:
//
//	settled N: acked A, dropped D, dead-lettered X, delayed R
//
// where A + D + X = N and R counts the RetryAfter settlements (a call may be delayed
// more than once). The dead rows stay in webhook_jobs_dead for an operator.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// Call is one webhook call to make.
type Call struct {
	// Batch names the run that published the call.
	Batch string `msgpack:"batch"`
	Event string `msgpack:"event"`
	ID    uint64 `msgpack:"id"`
	URL   string `msgpack:"url"`
}

// Status is the endpoint's HTTP status for one call.
type Status int

// The statuses the endpoint answers.
const (
	StatusOK              Status = 200
	StatusGone            Status = 410
	StatusTooManyRequests Status = 429
	StatusUnavailable     Status = 503
)

// Response is the endpoint's answer to one call.
type Response struct {
	// RetryAfter is the Retry-After header of a 429, in seconds.
	RetryAfter int
	Status     Status
}

// Endpoint stands in for the webhook endpoint: its answer depends on the seed, the call
// and the attempt only, so a run's results do not depend on scheduling.
type Endpoint struct{ Seed uint64 }

// Post returns the endpoint's answer to call id on attempt (1-based).
func (e Endpoint) Post(id uint64, attempt int) Response {
	r := mrand.New(mrand.NewPCG(e.Seed, id<<8|uint64(attempt&0xff)))
	switch v := r.IntN(100); {
	case v < 45:
		return Response{Status: StatusOK}
	case v < 75:
		return Response{Status: StatusTooManyRequests, RetryAfter: []int{1, 2, 5}[r.IntN(3)]}
	case v < 93:
		return Response{Status: StatusUnavailable}
	default:
		return Response{Status: StatusGone}
	}
}

var (
	errTooMany     = errors.New("endpoint answered 429 Too Many Requests")
	errUnavailable = errors.New("endpoint answered 503 Service Unavailable")
	errGone        = errors.New("endpoint answered 410 Gone")
)

// settleCall turns the endpoint's answer into the delivery's outcome; second is how
// long one Retry-After second lasts.
func settleCall(r Response, second time.Duration) error {
	switch r.Status {
	case StatusOK:
		return nil
	case StatusTooManyRequests:
		// The row stays out of the queue as long as the endpoint asked, then a claim
		// takes it again.
		return settle.RetryAfter(time.Duration(r.RetryAfter)*second, errTooMany)
	case StatusGone:
		return settle.Drop(errGone)
	default:
		return settle.Retry(errUnavailable)
	}
}

// Table names, before -prefix, and the cap.
const (
	tableJobs   = "webhook_jobs"
	tableDead   = "webhook_jobs_dead"
	maxAttempts = 5
)

// spec is webhook_jobs as seed 003 declares it: no group column, so the whole table is
// one queue.
func spec(name string) inbox.Table {
	return inbox.Table{Name: name, ID: "id", Attempt: "attempt", RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload"}
}

// schemas returns the statements creating the job table and the dead-letter table (the
// same columns; its id is copied, not generated).
func schemas(d inbox.Dialect, jobs, dead string) []string {
	switch d {
	case inbox.Postgres:
		return []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id BIGSERIAL PRIMARY KEY,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`, jobs),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id BIGINT PRIMARY KEY,
    attempt SMALLINT NOT NULL,
    retry_after TIMESTAMPTZ NOT NULL,
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`, dead),
		}
	case inbox.MySQL:
		return []string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS `%s` (\n"+
				"    id BIGINT AUTO_INCREMENT PRIMARY KEY,\n"+
				"    attempt SMALLINT NOT NULL DEFAULT 1,\n"+
				"    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n"+
				"    locked_until DATETIME(6) NULL,\n"+
				"    payload LONGBLOB NOT NULL)", jobs),
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS `%s` (\n"+
				"    id BIGINT PRIMARY KEY,\n"+
				"    attempt SMALLINT NOT NULL,\n"+
				"    retry_after DATETIME(6) NOT NULL,\n"+
				"    locked_until DATETIME(6) NULL,\n"+
				"    payload LONGBLOB NOT NULL)", dead),
		}
	default:
		// AUTOINCREMENT: SQLite would otherwise reuse the ids of deleted rows, and an id
		// already in the dead-letter table would keep its namesake from moving there.
		return []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_after TEXT NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%f+00:00', 'now')),
    locked_until TEXT,
    payload BLOB NOT NULL)`, jobs),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id INTEGER PRIMARY KEY,
    attempt INTEGER NOT NULL,
    retry_after TEXT NOT NULL,
    locked_until TEXT,
    payload BLOB NOT NULL)`, dead),
		}
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "webhooks:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	driver  string
	dsn     string
	n       int
	prefix  string
	second  time.Duration
	seed    uint64
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("webhooks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.driver, "driver", "", "sqlite, postgres or mysql (default: from the DSN's form)")
	fs.StringVar(&o.dsn, "dsn", "", "postgres://…, user@tcp(host:port)/db or file:path.db (default: an embedded SQLite file)")
	fs.IntVar(&o.n, "n", 100, "how many webhook calls to publish")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for both table names (for tests)")
	fs.DurationVar(&o.second, "second", 10*time.Millisecond, "how long one Retry-After second lasts (1s for real time)")
	fs.Uint64Var(&o.seed, "seed", 3, "seed of the endpoint's answers")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the calls are not all settled by then")
	fs.BoolVar(&o.verbose, "v", false, "log at Info level (default: Warn)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: webhooks [flags]\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == "prefix" {
				return // hidden: for tests
			}
			fmt.Fprintf(fs.Output(), "  -%-8s %s\n", f.Name, f.Usage)
		})
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.n < 1 || o.second <= 0 {
		return o, fmt.Errorf("-n must be at least 1 and -second positive")
	}
	if strings.ContainsAny(o.prefix, "\"`'.; ") {
		return o, fmt.Errorf("-prefix %q: letters, digits and _ only", o.prefix)
	}
	return o, nil
}

// tally counts the settlements of the deliveries this run claimed (the table may hold
// other runs' rows too) and closes done once all n reached a final state. A delivery is
// named by mount, id and attempt: a retry's event comes after the retry is written, and
// by then the row's next delivery may have begun (keyed by mount and id alone, that late
// event would erase the next delivery's claim, and its final settlement would go
// uncounted).
type tally struct {
	n    int
	done chan struct{}

	mu                            sync.Mutex
	ours                          map[delivery]bool // this run's deliveries not yet settled
	acked, dropped, dead, delayed int
}

// delivery names one delivery.
type delivery struct {
	mount, id string
	attempt   int
}

func newTally(n int) *tally {
	return &tally{n: n, done: make(chan struct{}), ours: map[delivery]bool{}}
}

// claim records that this run is handling m on mount.
func (t *tally) claim(mount string, m *settle.Message) {
	t.mu.Lock()
	t.ours[delivery{mount, m.ID, m.Attempt}] = true
	t.mu.Unlock()
}

// settled counts s if it settled a delivery this run claimed and was applied (a failed
// settlement leaves the row to come back).
func (t *tally) settled(s settle.Settled) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := delivery{s.Mount, s.ID, s.Attempt}
	if !t.ours[d] || s.Err != nil {
		return
	}
	delete(t.ours, d)
	switch {
	case s.Action == settle.ActionAck:
		t.acked++
	case s.Action == settle.ActionDrop:
		t.dropped++
	case s.Action == settle.ActionDeadLetter:
		t.dead++
	case s.Action == settle.ActionPark:
		t.delayed++
	}
	if t.acked+t.dropped+t.dead == t.n {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

// summary is the run's last line.
func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d, delayed %d", t.acked+t.dropped+t.dead, t.acked, t.dropped, t.dead, t.delayed)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	db, dialect, err := openSQL(o.driver, o.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	jobs, dead := o.prefix+tableJobs, o.prefix+tableDead
	for _, ddl := range schemas(dialect, jobs, dead) {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	ib := inbox.New(db, dialect, spec(jobs))
	var b [4]byte
	_, _ = rand.Read(b[:])
	batch := hex.EncodeToString(b[:])
	t := newTally(o.n)
	endpoint := Endpoint{Seed: o.seed}

	app, err := settle.New(settle.Config{Logger: logger, OnSettled: func(_ context.Context, s settle.Settled) { t.settled(s) }})
	if err != nil {
		return err
	}
	app.Mount(ib.Queue("", inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, c Call) error {
		if c.Batch == batch {
			t.claim("notify", m)
		}
		r := endpoint.Post(c.ID, m.Attempt)
		if r.Status == StatusGone {
			logger.WarnContext(ctx, "endpoint gone, call dropped", slog.Uint64("call", c.ID), slog.String("url", c.URL))
		}
		return settleCall(r, o.second)
	}), settle.Name("notify"),
		// Five deliveries, the first included, delayed ones too; the fifth failure moves
		// the row into the dead-letter table.
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(dead))
	if err := app.Validate(); err != nil {
		return err
	}
	for i := 1; i <= o.n; i++ {
		c := Call{Batch: batch, Event: "invoice.paid", ID: uint64(i), URL: fmt.Sprintf("https://hooks.example.com/%d", i)}
		if _, err := ib.Publish(ctx, "", c); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "published %d calls to %s (%s, batch %s)\n", o.n, jobs, dialect, batch)

	if err := runUntil(ctx, app, t.done, o.timeout, t.summary); err != nil {
		return err
	}
	fmt.Fprintln(stdout, t.summary())
	return nil
}

// runUntil runs app and stops it gracefully once done is closed (every message
// settled). It gives up, naming summary(), if app stops early, timeout passes or ctx
// ends first.
func runUntil(ctx context.Context, app *settle.App, done <-chan struct{}, timeout time.Duration, summary func() string) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case <-done:
	case err := <-errc:
		if ctx.Err() != nil { // interrupted before the App was up: its error says so too
			return fmt.Errorf("interrupted: %s: %w", summary(), err)
		}
		return fmt.Errorf("app stopped early: %v (%s)", err, summary())
	case <-timer.C:
		waitErr = fmt.Errorf("timed out after %s: %s", timeout, summary())
	case <-ctx.Done():
		waitErr = fmt.Errorf("interrupted: %s", summary())
	}
	cancel()
	return errors.Join(waitErr, <-errc)
}

// openSQL opens the database a DSN names and returns its inbox dialect. driver names it
// (sqlite, postgres or pgx, mysql or mariadb); empty, the DSN's form does: postgres:// or
// postgresql:// is PostgreSQL, empty, file:… or a .db/.sqlite path SQLite (empty: the
// file settle-webhooks.db in the temp directory), anything else MySQL/MariaDB.
func openSQL(driver, dsn string) (*sql.DB, inbox.Dialect, error) {
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
			dsn = "file:" + filepath.Join(os.TempDir(), "settle-webhooks.db")
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
