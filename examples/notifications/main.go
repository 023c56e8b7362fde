// Command notifications sends two kinds of notification, each from the Redis structure
// that fits it, and settles every delivery explicitly:
//
//   - Emails wait in a reliable list ({notify}:email). A consumer moves each one to its
//     own processing list while it sends it, so a crash loses nothing: another consumer
//     recovers it once the crashed one's heartbeat expires. An email without an address
//     is dropped (settle.Drop); a mailbox that bounces fails every delivery and, after
//     three (settle.MaxAttempts(3)), the email is dead-lettered to the list
//     {notify}:email.dead; a transient failure is retried with a copy.
//   - Push notifications are published on channels notify.push.<device> and read through
//     one pattern subscription (notify.push.*). Pub/Sub is at-most-once: a message
//     published while nobody listens is gone. A pattern names no channel, so retry copies
//     go to the out-retry channel notify.push.retry (which the pattern matches); a push
//     that fails twice is dead-lettered to the channel notify.dead, which a third mount
//     watches and logs.
//
// By default it runs on an embedded miniredis, so `go run ./examples/notifications`
// works anywhere; -redis points it at a real server. It sends -n emails and -n pushes,
// runs until every one is settled and every dead push has been watched, then prints, as
// its last line:
//
//	settled N: acked A, dropped D, dead-lettered X
//
// where A + D + X = N = 2n.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// Email is one email to send.
type Email struct {
	ID uint64 `msgpack:"id"`
	To string `msgpack:"to"`
}

// Push is one push notification to send.
type Push struct {
	Device string `msgpack:"device"`
	ID     uint64 `msgpack:"id"`
}

// Keys and channels, before -prefix.
const (
	keyEmail     = "{notify}:email"
	keyEmailDead = "{notify}:email.dead"
	chanPush     = "notify.push."
	chanRetry    = "notify.push.retry"
	chanDead     = "notify.dead"
)

// Mount names.
const (
	mountEmail = "email"
	mountPush  = "push"
	mountDead  = "dead-push-watch"
)

// The demo's deterministic failures.
var (
	errBounced   = errors.New("mailbox bounced")
	errTransient = errors.New("smtp timeout")
	errNoDevice  = errors.New("device token expired")
)

// sendEmail is the email mount's decision for one delivery of e.
func sendEmail(e Email, attempt int) error {
	switch {
	case e.To == "":
		return settle.Drop(errors.New("no address"))
	case e.ID%5 == 0:
		return errBounced
	case e.ID%3 == 0 && attempt == 1:
		return errTransient
	}
	return nil
}

// sendPush is the push mount's decision for one delivery of p.
func sendPush(p Push) error {
	if p.ID%4 == 0 {
		return errNoDevice
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
		fmt.Fprintln(os.Stderr, "notifications:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	n       int
	prefix  string
	redis   string
	timeout time.Duration
	verbose bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("notifications", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 60, "how many emails, and how many pushes, to send")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for every key and channel (for tests)")
	fs.StringVar(&o.redis, "redis", "", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default: an embedded miniredis)")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "give up if the notifications are not all settled by then")
	fs.BoolVar(&o.verbose, "v", false, "log at Info level (default: Warn level)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.n < 1 {
		return o, fmt.Errorf("-n %d: send at least one of each", o.n)
	}
	return o, nil
}

// tally counts the settlements of the email and push mounts, and the dead pushes the
// watch mount saw.
type tally struct {
	mu           sync.Mutex
	acked        int
	deadLettered int
	deadPushes   int // dead-lettered by the push mount
	done         chan struct{}
	dropped      int
	finished     bool
	n            int
	watched      int
}

func (t *tally) settled(s settle.Settled) {
	if s.Err != nil || !s.Final() {
		return // a retry copy, or a settlement not applied: the message comes again
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case s.Mount == mountDead:
		t.watched++
	case s.Action == settle.ActionAck:
		t.acked++
	case s.Action == settle.ActionDeadLetter:
		t.deadLettered++
		if s.Mount == mountPush {
			t.deadPushes++
		}
	default:
		t.dropped++
	}
	if !t.finished && t.acked+t.dropped+t.deadLettered == t.n && t.watched == t.deadPushes {
		t.finished = true
		close(t.done)
	}
}

func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("settled %d: acked %d, dropped %d, dead-lettered %d", t.acked+t.dropped+t.deadLettered, t.acked, t.dropped, t.deadLettered)
}

// run is the whole command: flags in args, the summary on stdout, logs on stderr.
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
	rdb, closeRedis, err := connect(ctx, o.redis)
	if err != nil {
		return err
	}
	defer closeRedis()

	p := o.prefix
	t := &tally{done: make(chan struct{}), n: 2 * o.n}
	app, err := settle.New(settle.Config{Logger: logger, OnSettled: func(_ context.Context, s settle.Settled) { t.settled(s) }})
	if err != nil {
		return err
	}
	app.Mount(settle.ReliableList(rdb, p+keyEmail),
		settle.Typed(func(_ context.Context, m *settle.Message, e Email) error { return sendEmail(e, m.Attempt) }),
		settle.Name(mountEmail), settle.MaxAttempts(3), settle.DeadLetter(p+keyEmailDead))
	app.Mount(settle.PubSubPattern(rdb, p+chanPush+"*", settle.OutRetry(p+chanRetry)),
		settle.Typed(func(_ context.Context, _ *settle.Message, push Push) error { return sendPush(push) }),
		settle.Name(mountPush), settle.MaxAttempts(2), settle.DeadLetter(p+chanDead))
	app.Mount(settle.PubSub(rdb, p+chanDead),
		settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			logger.WarnContext(ctx, "push dead-lettered", slog.String("from", m.Headers[settle.HeaderDeadSource]),
				slog.String("retry_count", m.Headers[settle.HeaderRetryCount]), slog.String("last_error", m.Headers[settle.HeaderDeadError]))
			return nil
		}),
		settle.Name(mountDead))
	if err := app.Validate(); err != nil {
		return err
	}

	pub := settle.NewPublisher(rdb)
	for i := 1; i <= o.n; i++ {
		e := Email{ID: uint64(i), To: fmt.Sprintf("user%d@example.com", i)}
		if i%7 == 0 {
			e.To = ""
		}
		if err := pub.PublishList(ctx, p+keyEmail, e); err != nil {
			return err
		}
	}

	// Pub/Sub keeps nothing for absent subscribers: a push nobody received (the App is
	// still subscribing) is published again; one that reached a subscriber is not.
	publishPushes := func() error {
		for i := 1; i <= o.n; i++ {
			push := Push{ID: uint64(i), Device: fmt.Sprintf("d%d", i%3)}
			if err := publishHeard(ctx, pub, p+chanPush+push.Device, push); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "sent %d emails to %q and %d pushes to %q\n", o.n, p+keyEmail, o.n, p+chanPush+"*")
		return nil
	}
	if err := runUntil(ctx, app, publishPushes, t.done, o.timeout, t.summary); err != nil {
		return err
	}
	fmt.Fprintln(stdout, t.summary())
	return nil
}

// runUntil runs app, calls publish while it runs, and stops app gracefully once done is
// closed (every notification settled). It gives up, naming summary(), if publish
// fails, app stops early, timeout passes or ctx ends first.
func runUntil(ctx context.Context, app *settle.App, publish func() error, done <-chan struct{}, timeout time.Duration, summary func() string) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()
	stop := func(err error) error {
		cancel()
		return errors.Join(err, <-errc)
	}
	if err := publish(); err != nil {
		return stop(err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		return stop(nil)
	case err := <-errc:
		if ctx.Err() != nil { // interrupted before the App was up: its error says so too
			return fmt.Errorf("interrupted: %s: %w", summary(), err)
		}
		return fmt.Errorf("app stopped early: %v (%s)", err, summary())
	case <-timer.C:
		return stop(fmt.Errorf("timed out after %s: %s", timeout, summary()))
	case <-ctx.Done():
		return stop(fmt.Errorf("interrupted: %s", summary()))
	}
}

// publishHeard publishes v on channel until a subscriber receives it.
func publishHeard(ctx context.Context, pub *settle.Publisher, channel string, v any) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		n, err := pub.PublishChannel(ctx, channel, v)
		if err != nil || n > 0 {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
