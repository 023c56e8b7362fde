// Command payments is the payment service of seed 001, "dead_letter" on a SQL table
// inbox: it charges payments through a card network that answers in one of three
// ways, and settles each answer differently:
//
//   - Approved: the charge went through; the row is deleted (ack).
//   - Declined: the network declined, as card networks sometimes do for a moment; the
//     charge is tried again at once (settle.Retry: lease cleared, attempt + 1).
//   - Invalid: the card number is malformed, and asking again gets the same answer; the
//     charge is dropped with a warning (settle.Drop).
//
// A charge gets three deliveries, the first included (settle.MaxAttempts(3)); the third
// decline moves its row into the dead-letter table payments_failed. The inbox table
// payment_jobs has no group column, so the whole table is one queue and its dead letters
// go to a table of the same columns rather than to a group: the inbox inserts the row
// (payload and attempt kept, lease cleared) into payments_failed and deletes it from
// payment_jobs in one transaction (one statement on Postgres, two on SQLite and
// MySQL/MariaDB). The seed writes the destination as "payments.failed"; every dialect
// reads a dot in a table name as a schema (SQLite: an attached database, MySQL: a
// database), so the table here is payments_failed.
//
// It runs on an embedded SQLite file by default; -dsn points it at Postgres
// (postgres://…), MySQL/MariaDB (user@tcp(host:port)/db) or another SQLite file
// (file:path.db), and -driver names the driver when the DSN's form does not. It creates
// both tables if missing, publishes -n charges, runs until each is settled, checks the
// rows of this run in payments_failed, and prints as its last line:
//
//	settled N: acked A, dropped D, dead-lettered X, failed rows F
//
// where A + D + X = N and F = X (the rows of this run found in payments_failed, each at
// attempt 3). The dead rows stay in payments_failed for an operator.
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

// Payment is one charge to make.
type Payment struct {
	AmountCents uint64 `msgpack:"amount_cents"`
	// Batch names the run that published the payment.
	Batch string `msgpack:"batch"`
	Card  string `msgpack:"card"`
	ID    uint64 `msgpack:"id"`
}

// Answer is what the card network says to one charge.
type Answer int

// The network's answers.
const (
	Approved Answer = iota
	Declined
	Invalid
)

// Network stands in for the card network: its answer depends on the seed, the payment
// and the attempt only, so a run's results do not depend on scheduling.
type Network struct{ Seed uint64 }

// Authorize returns the network's answer to payment id on attempt (1-based).
func (n Network) Authorize(id uint64, attempt int) Answer {
	r := mrand.New(mrand.NewPCG(n.Seed, id<<8|uint64(attempt&0xff)))
	switch v := r.IntN(100); {
	case v < 50:
		return Approved
	case v < 92:
		return Declined
	default:
		return Invalid
	}
}

var (
	errDeclined = errors.New("card network declined the charge")
	errInvalid  = errors.New("card number is invalid")
)

// settleCharge turns the network's answer into the delivery's outcome.
func settleCharge(a Answer) error {
	switch a {
	case Approved:
		return nil
	case Declined:
		// A decline may pass on the next try; the cap bounds how often it is asked.
		return settle.Retry(errDeclined)
	default:
		// Every attempt gets the same answer.
		return settle.Drop(errInvalid)
	}
}

// Table names, before -prefix, and the cap.
const (
	tableJobs   = "payment_jobs"
	tableFailed = "payments_failed"
	maxAttempts = 3
)

// spec is payment_jobs as seed 001 declares it, without the group column: the whole
// table is one queue.
func spec(name string) inbox.Table {
	return inbox.Table{Name: name, ID: "id", Attempt: "attempt", LockedUntil: "locked_until", Payload: "payload"}
}

// schemas returns the statements creating the job table and the dead-letter table (the
// same columns; its id is copied, not generated).
func schemas(d inbox.Dialect, jobs, failed string) []string {
	switch d {
	case inbox.Postgres:
		return []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id BIGSERIAL PRIMARY KEY,
    attempt SMALLINT NOT NULL DEFAULT 1,
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`, jobs),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id BIGINT PRIMARY KEY,
    attempt SMALLINT NOT NULL,
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`, failed),
		}
	case inbox.MySQL:
		return []string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS `%s` (\n"+
				"    id BIGINT AUTO_INCREMENT PRIMARY KEY,\n"+
				"    attempt SMALLINT NOT NULL DEFAULT 1,\n"+
				"    locked_until DATETIME(6) NULL,\n"+
				"    payload LONGBLOB NOT NULL)", jobs),
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS `%s` (\n"+
				"    id BIGINT PRIMARY KEY,\n"+
				"    attempt SMALLINT NOT NULL,\n"+
				"    locked_until DATETIME(6) NULL,\n"+
				"    payload LONGBLOB NOT NULL)", failed),
		}
	default:
		// AUTOINCREMENT: SQLite would otherwise reuse the ids of deleted rows, and an id
		// already in payments_failed would keep its namesake from moving there.
		return []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt INTEGER NOT NULL DEFAULT 1,
    locked_until TEXT,
    payload BLOB NOT NULL)`, jobs),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %q (
    id INTEGER PRIMARY KEY,
    attempt INTEGER NOT NULL,
    locked_until TEXT,
    payload BLOB NOT NULL)`, failed),
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
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	driver  string
	dsn     string
	n       int
	prefix  string
	seed    uint64
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.driver, "driver", "", "sqlite, postgres or mysql (default: from the DSN's form)")
	fs.StringVar(&o.dsn, "dsn", "", "postgres://…, user@tcp(host:port)/db or file:path.db (default: an embedded SQLite file)")
	fs.IntVar(&o.n, "n", 100, "how many payments to publish")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for both table names (for tests)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the card network's answers")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the payments are not all settled by then")
	fs.BoolVar(&o.verbose, "v", false, "log at Info level (default: Warn)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: payments [flags]\n")
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
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: publish at least one payment", o.n)
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

	mu                   sync.Mutex
	ours                 map[delivery]bool // this run's deliveries not yet settled
	acked, dropped, dead int
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
	}
	if t.acked+t.dropped+t.dead == t.n {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

// summary is the run's counts; the last line adds the failed rows to them.
func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d", t.acked+t.dropped+t.dead, t.acked, t.dropped, t.dead)
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
	jobs, failed := o.prefix+tableJobs, o.prefix+tableFailed
	for _, ddl := range schemas(dialect, jobs, failed) {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	ib := inbox.New(db, dialect, spec(jobs))
	var b [4]byte
	_, _ = rand.Read(b[:])
	batch := hex.EncodeToString(b[:])
	t := newTally(o.n)
	network := Network{Seed: o.seed}

	app, err := settle.New(settle.Config{Logger: logger, OnSettled: func(_ context.Context, s settle.Settled) { t.settled(s) }})
	if err != nil {
		return err
	}
	app.Mount(ib.Queue("", inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, p Payment) error {
		if p.Batch == batch {
			t.claim("charge", m)
		}
		a := network.Authorize(p.ID, m.Attempt)
		if a == Invalid {
			logger.WarnContext(ctx, "card invalid, charge dropped", slog.Uint64("payment", p.ID), slog.String("card", p.Card))
		}
		return settleCharge(a)
	}), settle.Name("charge"),
		// Three attempts, the first included; the third failure moves the row into the
		// payments_failed table instead.
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(failed))
	if err := app.Validate(); err != nil {
		return err
	}
	for i := 1; i <= o.n; i++ {
		p := Payment{AmountCents: uint64(100 * i), Batch: batch, Card: fmt.Sprintf("4000-0000-0000-%04d", i%10000), ID: uint64(i)}
		if _, err := ib.Publish(ctx, "", p); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "published %d payments to %s (%s, batch %s)\n", o.n, jobs, dialect, batch)

	if err := runUntil(ctx, app, t.done, o.timeout, t.summary); err != nil {
		return err
	}
	rows, err := failedRows(ctx, db, dialect, failed, batch)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Attempt != maxAttempts {
			return fmt.Errorf("%s: payment %d moved at attempt %d, want %d", failed, r.Payment.ID, r.Attempt, maxAttempts)
		}
	}
	fmt.Fprintf(stdout, "%s holds %d payments of this run, each at attempt %d\n", failed, len(rows), maxAttempts)
	fmt.Fprintf(stdout, "%s, failed rows %d\n", t.summary(), len(rows))
	return nil
}

// FailedRow is one row of the dead-letter table.
type FailedRow struct {
	Attempt int
	ID      int64
	Payment Payment
}

// failedRows reads the rows of batch in the dead-letter table.
func failedRows(ctx context.Context, db *sql.DB, d inbox.Dialect, table, batch string) ([]FailedRow, error) {
	q := fmt.Sprintf(`SELECT id, attempt, payload FROM %q ORDER BY id`, table)
	if d == inbox.MySQL {
		q = fmt.Sprintf("SELECT id, attempt, payload FROM `%s` ORDER BY id", table)
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	var out []FailedRow
	for rows.Next() {
		var r FailedRow
		var payload []byte
		if err := rows.Scan(&r.ID, &r.Attempt, &payload); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		if err := settle.Msgpack.Unmarshal(payload, &r.Payment); err != nil {
			return nil, fmt.Errorf("%s: row %d: payload: %w", table, r.ID, err)
		}
		if r.Payment.Batch == batch {
			out = append(out, r)
		}
	}
	return out, rows.Err()
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
// file settle-payments.db in the temp directory), anything else MySQL/MariaDB.
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
			dsn = "file:" + filepath.Join(os.TempDir(), "settle-payments.db")
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
