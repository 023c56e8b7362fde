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
// attempt kept. By default the dead rows stay there for an operator; with -review a
// subscriber on emails.dead logs each for a person and acks it.
//
// It runs on an embedded SQLite file by default; -dsn points it at Postgres
// (postgres://…) or MySQL/MariaDB (user@tcp(host:port)/db). It creates the table
// mail_jobs if missing, publishes -n mails, runs until each is settled, and prints as its
// last line:
//
//	settled N: acked A, dropped D, dead-lettered X, reviewed R
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/examplerun"
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
)

// spec is mail_jobs as seed 000 declares it.
var spec = inbox.Table{
	Name: table, ID: "id", Group: "name", Attempt: "attempt",
	RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload",
}

// schemas are mail_jobs per dialect.
var schemas = map[inbox.Dialect]string{
	inbox.SQLite: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    locked_until TEXT,
    payload BLOB NOT NULL)`,
	inbox.Postgres: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`,
	inbox.MySQL: `CREATE TABLE IF NOT EXISTS mail_jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(191) NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    locked_until DATETIME(6) NULL,
    payload LONGBLOB NOT NULL,
    KEY (name))`,
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

// lastLine is the run's last line.
func lastLine(t *examplerun.Tally) string {
	c := t.Counts()
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d, reviewed %d",
		c.Settled(), c.Acked, c.Dropped, c.Dead, c.Reviewed)
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
	db, dialect, err := examplerun.OpenSQL("", o.dsn, "settle-mailer.db")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, schemas[dialect]); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	ib := inbox.New(db, dialect, spec)
	var b [4]byte
	_, _ = rand.Read(b[:])
	batch := hex.EncodeToString(b[:])
	review := ""
	if o.review {
		review = "review"
	}
	t := examplerun.NewTally(o.n, review)
	provider := Provider{Seed: o.seed}

	app, err := settle.New(settle.Config{Logger: logger, OnSettled: func(_ context.Context, s settle.Settled) { t.Settled(s) }})
	if err != nil {
		return err
	}
	app.Mount(ib.Queue(groupEmails, inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, mail Mail) error {
		if mail.Batch == batch {
			t.Claim("send", m)
		}
		a := provider.Answer(mail.ID, m.Attempt)
		if a == Rejected {
			logger.WarnContext(ctx, "address rejected, dropped", slog.String("to", mail.To))
		}
		return settleMail(a, m.Attempt, o.backoff)
	}), settle.Name("send"),
		// Five deliveries, the first included; the fifth failure moves the row into the
		// emails.dead group.
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(groupDead))
	if o.review {
		app.Mount(ib.Queue(groupDead, inbox.Poll(20*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, mail Mail) error {
			if mail.Batch == batch {
				t.Claim("review", m)
			}
			logger.ErrorContext(ctx, "email not sent, needs a person", slog.String("to", mail.To), slog.Int("attempt", m.Attempt))
			return nil
		}), settle.Name("review"))
	}
	if err := app.Validate(); err != nil {
		return err
	}
	for i := 1; i <= o.n; i++ {
		if err := ib.Publish(ctx, groupEmails, Mail{Batch: batch, ID: uint64(i), To: fmt.Sprintf("user%d@example.com", i)}); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "published %d mails to %s/%s (%s, batch %s)\n", o.n, table, groupEmails, dialect, batch)

	if err := examplerun.Start(ctx, app).Until(ctx, t.Done(), o.timeout, func() string { return lastLine(t) }); err != nil {
		return err
	}
	fmt.Fprintln(stdout, lastLine(t))
	return nil
}
