// Package settletest runs settle Apps inside tests: on an embedded miniredis (or the
// real server named by SETTLE_REDIS_URL) and a paused fake clock that Advance moves, so
// in-process delays, durable delays, handler timeouts and backoffs come due without
// waiting, and on miniredis a claiming stream's min-idle too (on a real server Redis's
// own clock governs idle times: the harness refuses a ClaimingStream there unless
// Live); or live, on the wall clock. It also offers Broker, an in-memory broker whose
// topics run handlers through the same engine with no Redis at all.
//
// A test mounts its handlers, starts the App, publishes, advances the clock and waits
// for settlements (Config.OnSettled events) with a bounded wait, never a sleep:
//
//	h := settletest.New(t)
//	in := h.Redis.Key("in")
//	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), handler,
//		settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("delayed")}))
//	h.Start()
//	h.Publish(in, refund)
//	h.WaitAction(settle.ActionPark, 1)
//	h.Advance(30 * time.Second) // the backoff passes at once
//	h.WaitSettled(1)
package settletest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// DefaultWait bounds every Wait* call of a Harness unless WaitTimeout says otherwise.
const DefaultWait = 10 * time.Second

// Harness owns one App for one test. Make one with New.
type Harness struct {
	// App is the App under test; mount on it with Mount (or directly) before Start.
	App *settle.App
	// Clock is the paused fake clock the App runs on; nil in live mode.
	Clock *Clock
	// Redis is the test's Redis.
	Redis *Server

	cancel  context.CancelFunc
	done    chan error
	mu      sync.Mutex
	events  []settle.Settled
	probe   *settle.TestProbe
	stopped bool
	t       testing.TB
	timeout time.Duration
	wake    chan struct{}
}

// Option configures New.
type Option interface {
	apply(*options)
}

type options struct {
	clock   *Clock
	config  settle.Config
	live    bool
	redis   *Server
	timeout time.Duration
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// Live runs the App on the wall clock: delays take their real time and Advance fails
// the test. Defaults to a paused fake clock.
func Live() Option { return optionFunc(func(o *options) { o.live = true }) }

// WithClock runs the App on c (shared, say, by two harnesses in a restart test).
// Defaults to a new Clock standing at the current time.
func WithClock(c *Clock) Option { return optionFunc(func(o *options) { o.clock = c }) }

// WithConfig sets the App's configuration (Logger, DrainTimeout, …). The harness
// sets Test.Clock and Test.Probe and chains OnSettled after its own recording. Defaults to the zero
// Config.
func WithConfig(cfg settle.Config) Option {
	return optionFunc(func(o *options) { o.config = cfg })
}

// WithRedis uses s instead of a new Redis (a restart test shares one between two
// harnesses). Defaults to Redis(t).
func WithRedis(s *Server) Option { return optionFunc(func(o *options) { o.redis = s }) }

// WaitTimeout bounds every Wait* call. Defaults to DefaultWait.
func WaitTimeout(d time.Duration) Option { return optionFunc(func(o *options) { o.timeout = d }) }

// New returns a harness whose App is not started yet. Unless Live is given it runs on a
// paused fake Clock, to which the harness's miniredis (if any) is attached.
func New(t testing.TB, opts ...Option) *Harness {
	t.Helper()
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.redis == nil {
		o.redis = Redis(t)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultWait
	}
	h := &Harness{Redis: o.redis, t: t, timeout: o.timeout, wake: make(chan struct{})}
	cfg := o.config
	h.probe = &settle.TestProbe{}
	cfg.Test.Probe = h.probe
	if !o.live {
		h.Clock = o.clock
		if h.Clock == nil {
			h.Clock = NewClock(time.Now().Truncate(time.Millisecond))
		}
		if h.Redis.Mini != nil && o.clock == nil {
			h.Clock.AttachMiniredis(h.Redis.Mini)
		}
		cfg.Test.Clock = h.Clock
	}
	user := cfg.OnSettled
	cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
		h.record(s)
		if user != nil {
			user(ctx, s)
		}
	}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatalf("settletest: settle.New: %v", err)
	}
	h.App = app
	return h
}

// Advance moves the fake clock (and the attached miniredis) forward by d. Timers due by
// then fire in order; delays parked before the call come due.
func (h *Harness) Advance(d time.Duration) {
	h.t.Helper()
	if h.Clock == nil {
		h.t.Fatalf("settletest: Advance needs the fake clock; this harness is Live")
	}
	h.Clock.Advance(d)
}

// Idle waits until the App is idle at the clock's now, so that a test can assert that
// nothing happened: nothing is running or waiting to be settled, no delay due at now
// waits, and every mount has since read and found nothing (see settle.TestProbe.WaitIdle).
// A delay that came due at the last Advance has then been read, handled and settled:
//
//	h.Advance(29 * time.Second)
//	h.Idle() // the RetryAfter(30s) is not due: nothing was redelivered
//	h.Advance(time.Second)
//	h.Idle() // now it was, and its settlement is recorded
//
// It fails the test, naming what is still busy, when the wait timeout passes first (a
// handler that never returns, a mount whose every read finds something), and when the
// App is not running. Under the fake clock a read blocks at most settle.TestBlock, so
// Idle takes a few tens of milliseconds; a List or ReliableList blocks whole seconds
// (go-redis's resolution), so there it takes a second or two; with Live it may take up
// to a source's Block.
func (h *Harness) Idle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	if err := h.probe.WaitIdle(ctx); err != nil {
		h.t.Fatalf("settletest: Idle: %v", err)
	}
}

// Events returns the settlements recorded so far.
func (h *Harness) Events() []settle.Settled {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]settle.Settled(nil), h.events...)
}

// Mount mounts h on the App; see settle.App.Mount.
//
// On a real server (SETTLE_REDIS_URL) under the paused clock it refuses a
// ClaimingStream, failing the test: the stream's idle times, and so its min-idle, run on
// the server's own clock, which Advance cannot move. Run such a test on miniredis or with
// Live.
func (h *Harness) Mount(src settle.Source, handler settle.Handler, opts ...settle.MountOption) {
	h.t.Helper()
	if _, claiming := src.(*settle.ClaimingStreamSource); claiming && h.Clock != nil && h.Redis != nil && h.Redis.Real() {
		h.t.Fatalf("settletest: a ClaimingStream's min-idle runs on the Redis server's clock, which Advance cannot move on a real server (%s): run this test on miniredis, or with settletest.Live()", EnvRedisURL)
		return
	}
	h.App.Mount(src, handler, opts...)
}

// Publish encodes v with msgpack and appends it to the stream key; it returns the
// entry id and fails the test on error.
func (h *Harness) Publish(key string, v any, opts ...settle.PublishOption) string {
	h.t.Helper()
	id, err := settle.NewPublisher(h.Redis.Client).Publish(context.Background(), key, v, opts...)
	if err != nil {
		h.t.Fatalf("settletest: %v", err)
	}
	return id
}

// PublishBytes appends payload as it is to the stream key; it returns the entry id and
// fails the test on error.
func (h *Harness) PublishBytes(key string, payload []byte, opts ...settle.PublishOption) string {
	h.t.Helper()
	id, err := settle.NewPublisher(h.Redis.Client).PublishBytes(context.Background(), key, payload, opts...)
	if err != nil {
		h.t.Fatalf("settletest: %v", err)
	}
	return id
}

// Start validates the App and runs it on a goroutine, failing the test if validation
// fails. The App is stopped, and Run's return checked, when the test ends (or by Stop).
func (h *Harness) Start() {
	h.t.Helper()
	if err := h.App.Validate(); err != nil {
		h.t.Fatalf("settletest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.App.Run(ctx) }()
	h.t.Cleanup(h.Stop)
}

// Stop shuts the App down gracefully and waits for Run to return (bounded by the wait
// timeout), failing the test if Run returned an error. Further calls do nothing.
func (h *Harness) Stop() {
	h.t.Helper()
	h.mu.Lock()
	if h.stopped || h.cancel == nil {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("settletest: App.Run: %v", err)
		}
	case <-time.After(h.timeout):
		h.t.Errorf("settletest: App.Run did not return within %s of the stop", h.timeout)
	}
}

// WaitAction waits until n settlements with action a were recorded and returns all the
// events recorded so far.
func (h *Harness) WaitAction(a settle.Action, n int) []settle.Settled {
	h.t.Helper()
	return h.WaitFor(a.String()+" settlements", func(evs []settle.Settled) bool {
		k := 0
		for _, e := range evs {
			if e.Action == a {
				k++
			}
		}
		return k >= n
	})
}

// WaitFor waits until pred holds for the settlements recorded so far and returns them;
// it fails the test, naming what, when the wait timeout passes first.
func (h *Harness) WaitFor(what string, pred func([]settle.Settled) bool) []settle.Settled {
	h.t.Helper()
	deadline := time.NewTimer(h.timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		evs := append([]settle.Settled(nil), h.events...)
		wake := h.wake
		h.mu.Unlock()
		if pred(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-deadline.C:
			h.t.Fatalf("settletest: timed out after %s waiting for %s; %d events: %+v", h.timeout, what, len(evs), evs)
		}
	}
}

// WaitSettled waits until n settlements put their message in a final state (acked,
// dropped, rejected, lost or dead-lettered: settle.Settled.Final) and returns all the
// events recorded so far.
func (h *Harness) WaitSettled(n int) []settle.Settled {
	h.t.Helper()
	return h.WaitFor("final settlements", func(evs []settle.Settled) bool {
		k := 0
		for _, e := range evs {
			if e.Final() {
				k++
			}
		}
		return k >= n
	})
}

func (h *Harness) record(s settle.Settled) {
	h.mu.Lock()
	h.events = append(h.events, s)
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
}
