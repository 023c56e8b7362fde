// Command ratelimit shows a payment provider's limits shared by several consumers: the
// provider takes at most 50 charges a second from the whole service, and at most one
// charge of an account at a time. Three Apps in this one process stand in for three
// pods; each mounts the same stream {payments} with the same limits:
//
//	settle.RateLimit(50, time.Second)                     // every consumer together
//	settle.ConcurrencyBy(func(m) string { account }, 1)   // one charge per account at once
//
// The limits hold across the Apps because their state lives in Redis beside the
// stream, and "now" is Redis's TIME: a charge that must wait is not started and spends
// no attempt; it stays pending to its consumer (heartbeated) and starts when the limit
// lets it, while charges of other accounts go on. One account is hot (a third of the
// charges): its charges queue behind each other, not in front of the others.
//
// The stand-in provider counts what it was asked: how many charges a second it saw start
// on average and at most within one second, and the most of one account at once. Every consumer reports, through
// settle.Hooks.Delivery, how many of its charges waited and for what (the kind of
// limit, never the account); each delivery's log line says it too (waited_for, waited:
// run with -v). At the end it prints each limit's state as settle/admin reads it, and,
// as its last line:
//
//	charged N of N: by consumer A/B/C, R/s on average (limit 50), at most M in any second, at most K of an account at once (limit 1), waited W (rate X, concurrency Y)
//
// By default it runs on an embedded miniredis, so `go run ./examples/ratelimit` works
// anywhere; with -redis URL or SETTLE_REDIS_URL set it runs on that server.
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
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// Charge is one payment to take from an account.
type Charge struct {
	Account     string `msgpack:"account"`
	AmountCents uint64 `msgpack:"amount_cents"`
	ID          uint64 `msgpack:"id"`
}

// The provider's limits, which every consumer shares.
const (
	ratePerSecond = 50
	perAccount    = 1
)

// Key and group, with the {payments} hash tag: the limits' state is kept in keys of the
// stream's slot.
const (
	keyPayments   = "{payments}"
	groupCharges  = "charges"
	consumers     = 3
	hotAccount    = "acct-hot"
	headerAccount = "account"
	// headerBatch names the run that published a charge, so that a run on a server an
	// earlier run used counts only its own.
	headerBatch = "charge-batch"
)

// Provider stands in for the payment provider: each charge takes Call, and it records
// when each began and how many of one account ran at once.
type Provider struct {
	// Call is how long a charge takes.
	Call time.Duration

	mu        sync.Mutex
	starts    []time.Time
	running   map[string]int
	maxPerAcc int
}

// Charge takes one charge of account.
func (p *Provider) Charge(ctx context.Context, account string) error {
	p.mu.Lock()
	p.starts = append(p.starts, time.Now())
	p.running[account]++
	p.maxPerAcc = max(p.maxPerAcc, p.running[account])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running[account]--
		p.mu.Unlock()
	}()
	select {
	case <-time.After(p.Call):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// average is how many charges began a second from the first to the last: what the
// rate limit bounds (each start is timed when its handler begins, a little after the
// start the limit gave it; only the first start's delay could make it read high).
func (p *Provider) average() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.starts) < 2 {
		return 0
	}
	first, last := slices.MinFunc(p.starts, time.Time.Compare), slices.MaxFunc(p.starts, time.Time.Compare)
	return float64(len(p.starts)-1) / last.Sub(first).Seconds()
}

// maxInAnySecond is the most charges that began within one second of each other, as
// this process saw them: a few may crowd into a second behind a start that began late
// (the limit spaces the starts it gives, not when a busy machine runs them).
func (p *Provider) maxInAnySecond() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := slices.Clone(p.starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range s {
		for s[hi].Sub(s[lo]) >= time.Second {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// options are the command's flags.
type options struct {
	call    time.Duration
	n       int
	prefix  string
	redis   string
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.call, "call", 30*time.Millisecond, "how long the provider takes to charge")
	fs.IntVar(&o.n, "n", 300, "how many charges to publish")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for every key (for tests)")
	fs.StringVar(&o.redis, "redis", os.Getenv("SETTLE_REDIS_URL"), "Redis URL (default: $SETTLE_REDIS_URL, else an embedded miniredis)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the charges are not all taken by then")
	fs.BoolVar(&o.verbose, "v", false, "log each delivery at Debug level: its waits (waited_for, waited)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: publish at least one charge", o.n)
	}
	if o.call < 0 {
		return o, fmt.Errorf("-call %s: must not be negative", o.call)
	}
	return o, nil
}

// tally counts the charges taken, by consumer, and the waits by kind.
type tally struct {
	done       chan struct{} // closed once n are taken
	half       chan struct{} // closed once n/2 are taken
	n          int
	byConsumer [consumers]atomic.Int64
	taken      atomic.Int64
	waits      sync.Map // kind -> *atomic.Int64
}

// ack counts a charge taken by consumer c.
func (t *tally) ack(c int) {
	t.byConsumer[c].Add(1)
	switch t.taken.Add(1) {
	case int64(t.n):
		close(t.done)
		if t.n == 1 {
			close(t.half)
		}
	case int64(t.n / 2):
		close(t.half)
	}
}

// waited counts a delivery that waited for a limit of kind.
func (t *tally) waited(kind string) {
	v, _ := t.waits.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// waitsOf returns how many deliveries waited for a limit of kind.
func (t *tally) waitsOf(kind string) int64 {
	if v, ok := t.waits.Load(kind); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(1)
	}
}

// run is the whole command: flags in args, the summary on stdout, logs on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	rdb, closeRedis, err := connect(ctx, o.redis)
	if err != nil {
		return err
	}
	defer closeRedis()

	payments := o.prefix + keyPayments
	batch := newBatchID()
	provider := &Provider{Call: o.call, running: map[string]int{}}
	t := &tally{done: make(chan struct{}), half: make(chan struct{}), n: o.n}
	account := func(m *settle.Message) string { return m.Headers[headerAccount] }

	// Three Apps, as three pods would run: the same mount, the same limits.
	apps := make([]*settle.App, consumers)
	for c := range apps {
		app, err := settle.New(settle.Config{
			Logger: logger,
			Hooks: settle.Hooks{Delivery: func(ctx context.Context, d settle.DeliveryStart) context.Context {
				if d.WaitedFor != "" {
					t.waited(d.WaitedFor) // the kind of limit: never the account
				}
				return ctx
			}},
		})
		if err != nil {
			return err
		}
		consumer := settle.Consumer(fmt.Sprintf("pod-%d-%s", c+1, batch)) // each pod its own name
		app.Mount(settle.Stream(rdb, payments, groupCharges, consumer, settle.Block(200*time.Millisecond)),
			settle.Typed(func(ctx context.Context, m *settle.Message, ch Charge) error {
				if err := provider.Charge(ctx, ch.Account); err != nil {
					return err
				}
				if m.Headers[headerBatch] == batch { // not a charge an earlier run left
					t.ack(c)
				}
				return nil
			}),
			settle.Name("charges"),
			settle.Concurrency(8),
			settle.MaxAttempts(5),
			settle.RateLimit(ratePerSecond, time.Second),
			settle.ConcurrencyBy(account, perAccount),
		)
		if err := app.Validate(); err != nil {
			return err
		}
		apps[c] = app
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, consumers)
	for c, app := range apps {
		wg.Go(func() { errs[c] = app.Run(runCtx) })
	}
	// The charges come in at twice the provider's rate, as the consumers run: each
	// consumer reads some, and the limits hold across all three.
	pub := settle.NewPublisher(rdb)
	published := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / (2 * ratePerSecond))
		defer tick.Stop()
		for i := 1; i <= o.n; i++ {
			acct := fmt.Sprintf("acct-%02d", i%20)
			if i%3 == 0 {
				acct = hotAccount
			}
			ch := Charge{Account: acct, AmountCents: uint64(100 + (i*7919)%99900), ID: uint64(i)}
			if _, err := pub.Publish(runCtx, payments, ch, settle.Headers(map[string]string{headerAccount: acct, headerBatch: batch})); err != nil {
				published <- err
				return
			}
			select {
			case <-tick.C:
			case <-runCtx.Done():
				published <- runCtx.Err()
				return
			}
		}
		published <- nil
	}()
	fmt.Fprintf(stdout, "publishing %d charges to %q at %d/s; %d consumers share RateLimit(%d, 1s) and ConcurrencyBy(account, %d)\n",
		o.n, payments, 2*ratePerSecond, consumers, ratePerSecond, perAccount)
	var waitErr error
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	select {
	case <-t.half:
		// Each limit as settle/admin reads it (what settle stats and the console show),
		// half way through.
		states, err := admin.NewInspector(rdb).Limits(ctx, payments, groupCharges, []admin.FlowLimit{
			{Kind: admin.LimitRate, N: ratePerSecond, Per: time.Second},
			{Kind: admin.LimitConcurrencyBy, N: perAccount},
		}, admin.LimitsOptions{})
		if err != nil {
			waitErr = err
			break
		}
		for _, s := range states {
			fmt.Fprintf(stdout, "half way, %s: %s\n", s.Limit, describe(s))
		}
		select {
		case <-t.done:
		case <-timer.C:
			waitErr = fmt.Errorf("timed out after %s: %d of %d charges taken", o.timeout, t.taken.Load(), o.n)
		case <-ctx.Done():
			waitErr = fmt.Errorf("interrupted: %d of %d charges taken", t.taken.Load(), o.n)
		}
	case <-timer.C:
		waitErr = fmt.Errorf("timed out after %s: %d of %d charges taken", o.timeout, t.taken.Load(), o.n)
	case <-ctx.Done():
		waitErr = fmt.Errorf("interrupted: %d of %d charges taken", t.taken.Load(), o.n)
	}
	cancel()
	wg.Wait()
	if err := <-published; err != nil && waitErr == nil && !errors.Is(err, context.Canceled) {
		waitErr = err
	}
	if err := errors.Join(append([]error{waitErr}, errs...)...); err != nil {
		return err
	}
	by := make([]string, consumers)
	for c := range by {
		by[c] = fmt.Sprint(t.byConsumer[c].Load())
	}
	rate, conc := t.waitsOf("rate"), t.waitsOf("concurrency")
	fmt.Fprintf(stdout, "charged %d of %d: by consumer %s, %.1f/s on average (limit %d), at most %d in any second, at most %d of an account at once (limit %d), waited %d (rate %d, concurrency %d)\n",
		t.taken.Load(), o.n, strings.Join(by, "/"), provider.average(), ratePerSecond, provider.maxInAnySecond(), provider.maxPerAcc, perAccount,
		rate+conc+t.waitsOf("unreachable"), rate, conc)
	return nil
}

// describe says what a limit's state means.
func describe(s admin.LimitState) string {
	state := "room"
	if s.AtLimit {
		state = "at its limit"
	}
	if s.Rate > 0 {
		return fmt.Sprintf("%g/s, %d starts given ahead of now, %s, %d waiting", s.Rate, s.InUse, state, s.Waiting)
	}
	return fmt.Sprintf("%d slots held over %d accounts, %d accounts at their limit, %d waiting", s.InUse, s.Keys, s.KeysAtLimit, s.Waiting)
}

// newBatchID names one run.
func newBatchID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
