// Command refunds is the refund service of seed 002, "Retry, delay and dead letter": it
// sends refunds through a card processor that answers in one of four ways, and settles
// each answer differently:
//
//   - OK: the refund went through; the delivery is acked.
//   - Busy: the processor's rate limit is spent, so a delivery right now would be refused
//     again; the refund is retried after a backoff (settle.RetryAfter).
//   - Unavailable: the processor did not answer; the refund is retried at once
//     (settle.Retry).
//   - Declined: the card account is closed, and asking again gets the same answer; the
//     refund is dropped with a warning (settle.Drop).
//
// A refund gets five deliveries, the first included (settle.MaxAttempts(5)); the fifth
// that still fails is not retried but dead-lettered to the stream {refunds}.dlq, where
// the review mount reads it through its own group and logs it for a person to look at.
//
// -delay chooses where a Busy refund waits out its backoff, so each way can be watched
// in Redis:
//
//   - zset (the default): settle.Stream with
//     settle.DelayIn(delayed.DurableZset{Key: "{refunds}.delayed", TTL: time.Hour}):
//     the retry copy waits in that sorted set (the original is acked in the same
//     script) and is swept back into the stream when due; it survives a restart.
//   - inprocess: settle.Stream with settle.DelayIn(delayed.InProcess{}): the copy waits
//     in this process, the original stays pending until the copy is written.
//   - claiming: settle.ClaimingStream with min-idle = -backoff: a retry (delayed or not)
//     leaves the entry pending in the group's PEL, and the subscription claims it back
//     once it has been idle that long; no copy is written, and the attempt is Redis's
//     delivery counter.
//
// Every key shares the {refunds} hash tag, as Redis Cluster needs of keys that one
// script touches: the stream {refunds}, its dead-letter stream {refunds}.dlq and its
// delay set {refunds}.delayed.
//
// By default it runs on an embedded miniredis, so `go run ./examples/refunds` works on
// any machine; -redis points it at a real server instead. It publishes -n refunds, runs
// until every one of them is settled and every dead letter among them is reviewed, then
// prints, as its last line:
//
//	settled N: acked A, dropped D, dead-lettered X, reviewed R
//
// where A + D + X = N and R = X. It leaves its keys (the stream, the dead-letter stream
// and their groups) in Redis for inspection. Run again on the same server, it counts
// only the refunds it published itself: every refund carries a batch header naming its
// run, and retry copies and dead letters keep it.
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
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
)

// Refund is one refund to send through the processor.
type Refund struct {
	AmountCents uint64 `msgpack:"amount_cents"`
	Card        string `msgpack:"card"`
	ID          uint64 `msgpack:"id"`
}

// Answer is what the processor says to one refund.
type Answer int

// The processor's answers.
const (
	// OK: the refund went through.
	OK Answer = iota
	// Busy: past the rate limit; a delivery right now would be refused again.
	Busy
	// Unavailable: no answer; try again at once.
	Unavailable
	// Declined: the card account is closed; asking again gets the same answer.
	Declined
)

// String names the answer.
func (a Answer) String() string {
	switch a {
	case OK:
		return "ok"
	case Busy:
		return "busy"
	case Unavailable:
		return "unavailable"
	case Declined:
		return "declined"
	}
	return fmt.Sprintf("Answer(%d)", int(a))
}

// Processor stands in for the card processor. Its answer to a refund is chosen from the
// seed, the refund's id and the attempt alone, so a run's results do not depend on how
// goroutines are scheduled: the same seed always settles the same refunds the same way.
type Processor struct {
	// Seed chooses the answers.
	Seed uint64
}

// The processor's odds, in percent: with them a refund fails all five attempts (Busy or
// Unavailable every time) with probability 0.5^5 ≈ 3%, so a default run of 200 refunds
// dead-letters a few of them.
const (
	pctOK          = 40
	pctBusy        = 20
	pctUnavailable = 30
	// The remaining 10% are Declined.
)

// Answer returns the processor's answer to refund id on the given attempt (1-based).
func (p Processor) Answer(id uint64, attempt int) Answer {
	r := mrand.New(mrand.NewPCG(p.Seed, id<<8|uint64(attempt&0xff)))
	switch n := r.IntN(100); {
	case n < pctOK:
		return OK
	case n < pctOK+pctBusy:
		return Busy
	case n < pctOK+pctBusy+pctUnavailable:
		return Unavailable
	default:
		return Declined
	}
}

// errBusy, errUnavailable and errDeclined are the processor's refusals as errors, kept
// in logs and in a dead letter's last-error header.
var (
	errBusy        = errors.New("processor busy: rate limit reached")
	errUnavailable = errors.New("processor unavailable: no answer")
	errDeclined    = errors.New("card declined: account closed")
)

// settleRefund turns the processor's answer into the delivery's outcome.
func settleRefund(a Answer, backoff time.Duration) error {
	switch a {
	case OK:
		return nil
	case Busy:
		// Past the rate limit: a delivery right now would be refused again.
		return settle.RetryAfter(backoff, errBusy)
	case Unavailable:
		// No answer: try again at once, up to the attempts cap.
		return settle.Retry(errUnavailable)
	default:
		return settle.Drop(errDeclined)
	}
}

// Key and group names, as in the seed, with the {refunds} hash tag that keeps the keys
// of one script in one Redis Cluster slot.
const (
	keyRefunds   = "{refunds}"
	keyDLQ       = "{refunds}.dlq"
	keyDelayed   = "{refunds}.delayed"
	delayTTL     = time.Hour // the delay set expires an hour after its last park
	groupRefunds = "refunds"
	groupReview  = "refunds-review"
	maxAttempts  = 5
	// headerBatch names the run that published a refund. Retry copies and dead letters
	// keep the headers a message arrived with, so it tells this run's refunds from those
	// an earlier run left in the same streams.
	headerBatch = "refund-batch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "refunds:", err)
		os.Exit(1)
	}
}

// Where a Busy refund's delay waits (-delay).
const (
	delayInProcess = "inprocess"
	delayZset      = "zset"
	delayClaiming  = "claiming"
)

// options are the command's flags.
type options struct {
	backoff time.Duration
	delay   string
	n       int
	prefix  string
	redis   string
	seed    uint64
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("refunds", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The seed's busy processor asks for 30s; the demo waits far less so it ends quickly.
	fs.DurationVar(&o.backoff, "backoff", 100*time.Millisecond, "how long a Busy refund waits before its retry (the seed uses 30s)")
	fs.StringVar(&o.delay, "delay", delayZset, "where a Busy refund waits: inprocess, zset (the sorted set {refunds}.delayed) or claiming (pending in the group, claimed back after -backoff)")
	fs.IntVar(&o.n, "n", 200, "how many refunds to publish")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for every key (for tests)")
	fs.StringVar(&o.redis, "redis", "", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default: an embedded miniredis)")
	fs.Uint64Var(&o.seed, "seed", 2, "seed of the processor's answers")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the refunds are not all settled by then")
	fs.BoolVar(&o.verbose, "v", false, "log at Info level (default: Warn level)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: refunds [flags]\n")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name == "prefix" {
				return // hidden: for tests
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" {
				def = " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(fs.Output(), "  -%-8s %s%s\n", f.Name, f.Usage, def)
		})
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: publish at least one refund", o.n)
	}
	if o.backoff <= 0 {
		return o, fmt.Errorf("-backoff %s: must be positive", o.backoff)
	}
	switch o.delay {
	case delayInProcess, delayZset, delayClaiming:
	default:
		return o, fmt.Errorf("-delay %q: want %s, %s or %s", o.delay, delayInProcess, delayZset, delayClaiming)
	}
	if o.delay == delayZset && o.backoff >= delayTTL {
		return o, fmt.Errorf("-backoff %s: the delay set keeps delays shorter than its TTL (%s)", o.backoff, delayTTL)
	}
	return o, nil
}

// tally counts this run's settlements.
type tally struct {
	mu           sync.Mutex
	acked        int
	deadLettered int
	done         chan struct{}
	dropped      int
	finished     bool // done is closed
	n            int
	reviewed     int
	// ours holds the deliveries of this run's refunds (and of their dead letters) that
	// were handed to a handler and not yet settled.
	ours map[delivery]bool
}

// delivery names one delivery. Entry ids are unique only within their stream, and on a
// claiming stream an entry keeps its id from attempt to attempt: the event of a retry
// may come after the entry's next delivery began, so the attempt is part of the name.
type delivery struct {
	mount, id string
	attempt   int
}

// claim records that a handler got one of this run's deliveries.
func (t *tally) claim(mount string, m *settle.Message) {
	t.mu.Lock()
	t.ours[delivery{mount, m.ID, m.Attempt}] = true
	t.mu.Unlock()
}

// settled counts a final settlement of one of this run's deliveries.
func (t *tally) settled(s settle.Settled) {
	if s.Err != nil {
		return // not applied: the entry stays pending and is delivered again
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := delivery{s.Mount, s.ID, s.Attempt}
	if !t.ours[d] {
		return
	}
	delete(t.ours, d)
	if !s.Final() {
		return // a retry copy: the copy is a delivery of its own
	}
	switch {
	case s.Mount == mountReview:
		t.reviewed++
	case s.Action == settle.ActionAck:
		t.acked++
	case s.Action == settle.ActionDeadLetter:
		t.deadLettered++
	default: // drop (and reject or lose, which this mount's policy does not produce)
		t.dropped++
	}
	if !t.finished && t.acked+t.dropped+t.deadLettered == t.n && t.reviewed == t.deadLettered {
		t.finished = true
		close(t.done)
	}
}

func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d, reviewed %d",
		t.acked+t.dropped+t.deadLettered, t.acked, t.dropped, t.deadLettered, t.reviewed)
}

// Mount names.
const (
	mountRefunds = "refunds"
	mountReview  = "review"
)

// run is the whole command: flags in args, the summary on stdout, logs on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runObserved(ctx, args, stdout, stderr, nil)
}

// runObserved is run with observe, when not nil, called with every settlement after it
// is counted (the tests look at Redis from it while the run goes on).
func runObserved(ctx context.Context, args []string, stdout, stderr io.Writer, observe func(context.Context, settle.Settled)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	rdb, closeRedis, err := connect(ctx, o.redis)
	if err != nil {
		return err
	}
	defer closeRedis()

	refunds, dlq := o.prefix+keyRefunds, o.prefix+keyDLQ
	batch := newBatchID()
	t := &tally{done: make(chan struct{}), n: o.n, ours: map[delivery]bool{}}
	proc := Processor{Seed: o.seed}

	app, err := settle.New(settle.Config{
		Logger: logger,
		OnSettled: func(ctx context.Context, s settle.Settled) {
			t.settled(s)
			if observe != nil {
				observe(ctx, s)
			}
		},
	})
	if err != nil {
		return err
	}
	block := settle.Block(200 * time.Millisecond) // a short block so shutdown is quick
	// Where a Busy refund waits out its backoff.
	var src settle.Source
	var delay settle.MountOption
	switch o.delay {
	case delayInProcess:
		src, delay = settle.Stream(rdb, refunds, groupRefunds, block), settle.DelayIn(delayed.InProcess{})
	case delayZset:
		src = settle.Stream(rdb, refunds, groupRefunds, block)
		delay = settle.DelayIn(delayed.DurableZset{Key: o.prefix + keyDelayed, TTL: delayTTL})
	case delayClaiming:
		// Retries stay pending; min-idle is the backoff, so a Busy refund waits exactly
		// that long, and so does an Unavailable one.
		src, delay = settle.ClaimingStream(rdb, refunds, groupRefunds, o.backoff, block), settle.DelayIn(delayed.InProcess{})
	}
	app.Mount(src,
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			if m.Headers[headerBatch] == batch {
				t.claim(mountRefunds, m)
			}
			a := proc.Answer(r.ID, m.Attempt)
			if a == Declined {
				logger.WarnContext(ctx, "card declined, refund dropped", slog.Uint64("refund_id", r.ID))
			}
			return settleRefund(a, o.backoff)
		}),
		settle.Name(mountRefunds),
		// Five deliveries of one refund, the first included; then the dead-letter stream.
		settle.MaxAttempts(maxAttempts),
		settle.DeadLetter(dlq),
		// A plain error (here only a payload that does not decode: an entry another client
		// wrote) waits -backoff too, rather than settle's default 100ms doubling.
		settle.Backoff(func(int, error) time.Duration { return o.backoff }),
		delay,
	)
	// review reads the dead letters through its own group and logs each for a person.
	// It acks every one, even a dead letter that holds no refund (an entry another
	// client wrote to the refunds stream): retrying it here would loop forever.
	app.Mount(settle.Stream(rdb, dlq, groupReview, block),
		settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			if m.Headers[headerBatch] == batch {
				t.claim(mountReview, m)
			}
			attrs := []any{
				slog.String("retry_count", m.Headers[settle.HeaderRetryCount]),
				slog.String("dead_id", m.Headers[settle.HeaderDeadID]),
				slog.String("last_error", m.Headers[settle.HeaderDeadError]),
			}
			var r Refund
			if err := m.Decode(&r); err != nil {
				logger.ErrorContext(ctx, "dead letter holds no refund; a person should look at it", append(attrs, slog.String("msg_id", m.ID), slog.Any("error", err))...)
				return nil
			}
			logger.ErrorContext(ctx, "refund needs a person to look at it", append([]any{slog.Uint64("refund_id", r.ID)}, attrs...)...)
			return nil
		}),
		settle.Name(mountReview),
	)
	if err := app.Validate(); err != nil {
		return err
	}

	pub := settle.NewPublisher(rdb)
	for i := 1; i <= o.n; i++ {
		r := Refund{ID: uint64(i), Card: fmt.Sprintf("4000-0000-0000-%04d", i%10000), AmountCents: uint64(100 + (i*7919)%99900)}
		if _, err := pub.Publish(ctx, refunds, r, settle.Headers(map[string]string{headerBatch: batch})); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "published %d refunds to %q (batch %s, delays: %s)\n", o.n, refunds, batch, o.delay)

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

// connect returns a client on the server at url, or on an embedded miniredis when url
// is empty, and a function that closes both.
func connect(ctx context.Context, url string) (redis.UniversalClient, func(), error) {
	if url == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, nil, fmt.Errorf("start embedded redis: %w", err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		return rdb, func() { _ = rdb.Close(); mr.Close() }, nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis %q: %w", url, err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("-redis %q: ping: %w", url, err)
	}
	return rdb, func() { _ = rdb.Close() }, nil
}

// newBatchID names one run.
func newBatchID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
