// Command mailer is the mail service of seed 000, "Retries and dead letters" on a SQL
// table inbox: it sends mails through a provider that answers in one of four ways, and
// settles each answer differently:
//
//   - OK: the mail went out; the row is deleted (ack).
//   - Busy: the provider's rate limit is spent; the mail waits attempt × -backoff
//     (settle.RetryAfter: the row's retry_after column holds the wait).
//   - Unavailable: the provider did not answer; the mail is tried again at once
//     (settle.Retry: lease cleared, attempt + 1).
//   - Rejected: the mailbox does not exist; the mail is dropped with a warning.
//
// A mail gets five deliveries, the first included (settle.MaxAttempts(5)); the fifth
// failure moves its row into the group emails.dead of the same table, payload and
// attempt kept, its last_error and dead_at saying why and when. By default the dead rows
// stay there for an operator; with -review a subscriber on emails.dead logs each for a
// person and acks it.
//
// It runs on an embedded SQLite file by default; -dsn points it at Postgres
// (postgres://…) or MySQL/MariaDB (user@tcp(host:port)/db). It creates the table
// mail_jobs if missing (adding last_error and dead_at to one from before them),
// publishes -n mails, runs until each is settled, and prints as its last line:
//
//	settled N: acked A, dropped D, dead-lettered X, reviewed R
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

// Mail is one mail to send.
type Mail struct {
	// Batch names the run that published the mail.
	Batch string `msgpack:"batch"`
	ID    uint64 `msgpack:"id"`
	To    string `msgpack:"to"`
}

// Answer is what the provider says to one mail.
type Answer int

// The provider's answers.
const (
	OK Answer = iota
	Busy
	Unavailable
	Rejected
)

// Provider stands in for the mail provider: its answer depends on the seed, the mail and
// the attempt only, so a run's results do not depend on scheduling.
type Provider struct{ Seed uint64 }

// Answer returns the provider's answer to mail id on attempt (1-based).
func (p Provider) Answer(id uint64, attempt int) Answer {
	r := mrand.New(mrand.NewPCG(p.Seed, id<<8|uint64(attempt&0xff)))
	switch n := r.IntN(100); {
	case n < 40:
		return OK
	case n < 65:
		return Busy
	case n < 90:
		return Unavailable
	default:
		return Rejected
	}
}

var (
	errBusy        = errors.New("provider busy: rate limit spent")
	errUnavailable = errors.New("provider unavailable: no answer")
	errRejected    = errors.New("mailbox does not exist")
)

// settleMail turns the provider's answer into the delivery's outcome.
func settleMail(a Answer, attempt int, backoff time.Duration) error {
	switch a {
	case OK:
		return nil
	case Busy:
		// The rate limit is spent: a retry right now would be refused again.
		return settle.RetryAfter(backoff*time.Duration(attempt), errBusy)
	case Unavailable:
		// No answer: the next attempt may reach it.
		return settle.Retry(errUnavailable)
	default:
		// Every attempt gets the same answer.
		return settle.Drop(errRejected)
	}
}

const (
	table       = "mail_jobs"
	groupEmails = "emails"
	groupDead   = "emails.dead"
	maxAttempts = 5
	mountSend   = "send"
	mountReview = "review"
)

// spec is mail_jobs as seed 000 declares it, with the two optional columns that tell an
// operator why and when a mail died: the handler's last error and when the row was
// dead-lettered (settle inbox dead ls|replay --error filters on them).
var spec = inbox.Table{
	Name: table, ID: "id", Group: "name", Attempt: "attempt",
	RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload",
	LastError: "last_error", DeadAt: "dead_at",
}

// schemas are mail_jobs per dialect.
var schemas = map[inbox.Dialect]string{
	inbox.SQLite: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    locked_until TEXT,
    payload BLOB NOT NULL,
    last_error TEXT,
    dead_at TEXT)`,
	inbox.Postgres: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL,
    last_error TEXT,
    dead_at TIMESTAMPTZ)`,
	inbox.MySQL: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(191) NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    locked_until DATETIME(6) NULL,
    payload LONGBLOB NOT NULL,
    last_error TEXT NULL,
    dead_at DATETIME(6) NULL,
    KEY (name))`,
}

// addedColumns are the columns mail_jobs gained after its first version, with their type
// per dialect (dead_at, like locked_until, has no DEFAULT: NULL until the row dies).
var addedColumns = []struct{ name, sqlite, postgres, mysql string }{
	{"last_error", "TEXT", "TEXT", "TEXT NULL"},
	{"dead_at", "TEXT", "TIMESTAMPTZ", "DATETIME(6) NULL"},
}

// migrate adds addedColumns to a mail_jobs created before them (CREATE TABLE IF NOT
// EXISTS leaves such a table as it is), as a real service's migration would.
func migrate(ctx context.Context, db *sql.DB, d inbox.Dialect) error {
	for _, c := range addedColumns {
		if d == inbox.Postgres {
			if _, err := db.ExecContext(ctx, "ALTER TABLE mail_jobs ADD COLUMN IF NOT EXISTS "+c.name+" "+c.postgres); err != nil {
				return fmt.Errorf("add column %s to %s: %w", c.name, table, err)
			}
			continue
		}
		// MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), SQLite neither: ask first.
		q, typ := `SELECT COUNT(*) FROM pragma_table_info('mail_jobs') WHERE name = ?`, c.sqlite
		if d == inbox.MySQL {
			q, typ = `SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'mail_jobs' AND column_name = ?`, c.mysql
		}
		var n int
		if err := db.QueryRowContext(ctx, q, c.name).Scan(&n); err != nil {
			return fmt.Errorf("look for column %s of %s: %w", c.name, table, err)
		}
		if n > 0 {
			continue
		}
		if _, err := db.ExecContext(ctx, "ALTER TABLE mail_jobs ADD COLUMN "+c.name+" "+typ); err != nil {
			return fmt.Errorf("add column %s to %s: %w", c.name, table, err)
		}
	}
	return nil
}

// dueIndex is the index the README recommends: with it a claim takes the earliest due
// rows of a group first without reading past those parked for later (without it the
// inbox warns once when a mount starts).
const dueIndex = "mail_jobs_due"

// createDueIndex creates dueIndex on (name, retry_after, id) unless it is there.
func createDueIndex(ctx context.Context, db *sql.DB, d inbox.Dialect) error {
	create := "CREATE INDEX IF NOT EXISTS " + dueIndex + " ON mail_jobs (name, retry_after, id)"
	if d == inbox.MySQL {
		// MySQL 8 has no CREATE INDEX IF NOT EXISTS (MariaDB has): ask first.
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'mail_jobs' AND index_name = ?`, dueIndex).Scan(&n); err != nil {
			return fmt.Errorf("look for index %s of %s: %w", dueIndex, table, err)
		}
		if n > 0 {
			return nil
		}
		create = "CREATE INDEX " + dueIndex + " ON mail_jobs (name, retry_after, id)"
	}
	if _, err := db.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("create index %s on %s: %w", dueIndex, table, err)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mailer:", err)
		os.Exit(1)
	}
}

type options struct {
	backoff time.Duration
	dsn     string
	n       int
	review  bool
	seed    uint64
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mailer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.backoff, "backoff", 20*time.Millisecond, "a Busy mail waits attempt × backoff (the seed uses 1s)")
	fs.StringVar(&o.dsn, "dsn", "", "postgres://… or user@tcp(host:port)/db (default: an embedded SQLite file)")
	fs.IntVar(&o.n, "n", 100, "how many mails to publish")
	fs.BoolVar(&o.review, "review", false, "mount the review subscriber on emails.dead (it acks, deleting the dead rows)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the provider's answers")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the mails are not all settled by then")
	fs.BoolVar(&o.verbose, "v", false, "log at Info level (default: Warn)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.n < 1 || o.backoff <= 0 {
		return o, fmt.Errorf("-n must be at least 1 and -backoff positive")
	}
	return o, nil
}

// tally counts the settlements of the deliveries this run claimed (the table may hold
// other runs' rows too) and closes done once all n reached a final state and, with
// review, every dead letter was reviewed. A delivery is named by mount, id and attempt:
// a retry's event comes after the retry is written, and by then the row's next delivery
// may have begun (keyed by mount and id alone, that late event would erase the next
// delivery's claim, and its final settlement would go uncounted).
type tally struct {
	n      int
	review bool // a review mount reads the dead letters
	done   chan struct{}

	mu                             sync.Mutex
	ours                           map[delivery]bool // this run's deliveries not yet settled
	acked, dropped, dead, reviewed int
}

// delivery names one delivery.
type delivery struct {
	mount, id string
	attempt   int
}

func newTally(n int, review bool) *tally {
	return &tally{n: n, review: review, done: make(chan struct{}), ours: map[delivery]bool{}}
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
	case s.Mount == mountReview && s.Final():
		t.reviewed++
	case s.Action == settle.ActionAck:
		t.acked++
	case s.Action == settle.ActionDrop:
		t.dropped++
	case s.Action == settle.ActionDeadLetter:
		t.dead++
	}
	if t.acked+t.dropped+t.dead == t.n && (!t.review || t.reviewed == t.dead) {
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
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d, reviewed %d", t.acked+t.dropped+t.dead, t.acked, t.dropped, t.dead, t.reviewed)
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
	db, dialect, err := openSQL(o.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schemas[dialect]); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	if err := migrate(ctx, db, dialect); err != nil {
		return err
	}
	if err := createDueIndex(ctx, db, dialect); err != nil {
		return err
	}
	ib := inbox.New(db, dialect, spec)
	var b [4]byte
	_, _ = rand.Read(b[:])
	batch := hex.EncodeToString(b[:])
	t := newTally(o.n, o.review)
	provider := Provider{Seed: o.seed}

	app, err := settle.New(settle.Config{Logger: logger, OnSettled: func(_ context.Context, s settle.Settled) { t.settled(s) }})
	if err != nil {
		return err
	}
	app.Mount(ib.Queue(groupEmails, inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, mail Mail) error {
		if mail.Batch == batch {
			t.claim(mountSend, m)
		}
		a := provider.Answer(mail.ID, m.Attempt)
		if a == Rejected {
			logger.WarnContext(ctx, "address rejected, dropped", slog.String("to", mail.To))
		}
		return settleMail(a, m.Attempt, o.backoff)
	}), settle.Name(mountSend),
		// Five deliveries, the first included; the fifth failure moves the row into the
		// emails.dead group.
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(groupDead))
	if o.review {
		app.Mount(ib.Queue(groupDead, inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, mail Mail) error {
			if mail.Batch == batch {
				t.claim(mountReview, m)
			}
			logger.ErrorContext(ctx, "email not sent, needs a person", slog.String("to", mail.To), slog.Int("attempt", m.Attempt))
			return nil
		}), settle.Name(mountReview))
	}
	if err := app.Validate(); err != nil {
		return err
	}
	for i := 1; i <= o.n; i++ {
		if _, err := ib.Publish(ctx, groupEmails, Mail{Batch: batch, ID: uint64(i), To: fmt.Sprintf("user%d@example.com", i)}); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "published %d mails to %s/%s (%s, batch %s)\n", o.n, table, groupEmails, dialect, batch)

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

// openSQL opens the database dsn names and returns its inbox dialect: postgres:// or
// postgresql:// is PostgreSQL, empty, file:… or a .db/.sqlite path SQLite (empty: the
// file settle-mailer.db in the temp directory), anything else MySQL/MariaDB.
func openSQL(dsn string) (*sql.DB, inbox.Dialect, error) {
	switch {
	case dsn == "", strings.HasPrefix(dsn, "file:"), strings.HasSuffix(dsn, ".db"), strings.HasSuffix(dsn, ".sqlite"):
		if dsn == "" {
			dsn = "file:" + filepath.Join(os.TempDir(), "settle-mailer.db")
		}
		if !strings.Contains(dsn, "_pragma") {
			dsn += sep(dsn) + "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
		}
		db, err := sql.Open("sqlite", dsn)
		return db, inbox.SQLite, err
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := sql.Open("pgx", dsn)
		return db, inbox.Postgres, err
	default:
		if !strings.Contains(dsn, "parseTime") {
			dsn += sep(dsn) + "parseTime=true"
		}
		db, err := sql.Open("mysql", dsn)
		return db, inbox.MySQL, err
	}
}

// sep is the separator before one more DSN parameter.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}
