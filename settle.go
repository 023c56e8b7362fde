package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/timerq"
)

// Config configures an App. Its zero value is valid.
type Config struct {
	// DrainTimeout is how long a graceful shutdown lets in-flight handlers finish before
	// their contexts are cancelled (with the cause ErrDrainTimeout). Defaults to
	// DefaultDrainTimeout.
	DrainTimeout time.Duration

	// Hooks observe every delivery, settlement and event of the App's mounts (the
	// settleotel module fills them). Defaults to none.
	Hooks Hooks

	// Logger receives settle's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// Middleware wraps the handler of every mount, outside the mount's own (Use); the
	// first one given is the outermost. Defaults to none.
	Middleware []Middleware

	// OnSettled, when set, is called after every settlement is applied (or failed to
	// apply), from the goroutine that applied it. It is Hooks.Settled under another name,
	// called after it: use Hooks.Settled (with the other Hooks, as settleotel fills
	// them); OnSettled will go. It must be safe for concurrent use and
	// should return quickly. Events of one message can arrive out of order across its
	// deliveries: once a retry is written, the next delivery may be handled and settled
	// before the retry's own event is reported, so key any tally by (Mount, ID, Attempt),
	// never by ID alone (ids do not repeat across restarts; an inbox's are its row ids).
	// Defaults to nil.
	OnSettled func(ctx context.Context, s Settled)

	// Test holds settings for tests only; the settletest package fills it. Defaults to
	// production behaviour.
	Test TestConfig
}

// TestConfig holds settings for tests only.
type TestConfig struct {
	// Clock drives in-process delays, claim and lease heartbeats and the drain timeout,
	// and stands in for the servers' clocks in settle's scripts and statements
	// (settletest.Clock). Defaults to the wall clock.
	Clock Clock

	// Probe, when set, lets a test wait until the App is idle at its clock's now
	// (TestProbe.WaitIdle); settletest's Harness sets it. Under a Clock it also bounds
	// every read's block to TestBlock, so that a read that finds nothing returns soon.
	// Defaults to nil.
	Probe *TestProbe
}

// Clock tells the time and makes timers: the clock a test gives TestConfig.Clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock: C delivers the time once it fires; Stop
// prevents that and reports whether it did. It is an interface literal, so that any
// clock with these two methods serves settle and its packages alike.
type Timer = interface {
	C() <-chan time.Time
	Stop() bool
}

// DefaultDrainTimeout is how long a graceful shutdown waits for in-flight handlers
// unless Config.DrainTimeout says otherwise.
const DefaultDrainTimeout = 10 * time.Second

// App runs mounts: each a source, a handler and a policy.
type App struct {
	eng    *engine
	mounts []*mount
	mu     sync.Mutex
	ran    atomic.Bool
}

// New returns an App. Nothing starts until Run.
func New(cfg Config) (*App, error) {
	if cfg.DrainTimeout < 0 {
		return nil, &ConfigError{Problem: fmt.Sprintf("Config.DrainTimeout %s is negative", cfg.DrainTimeout)}
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	e := &engine{clock: clock.Real{}, drainTimeout: cfg.DrainTimeout, hooks: cfg.Hooks, logger: cfg.Logger, middleware: slices.Clone(cfg.Middleware), onSettled: cfg.OnSettled}
	if e.logger == nil {
		e.logger = slog.Default()
	}
	if cfg.Test.Clock != nil {
		e.clock, e.testClock = cfg.Test.Clock, cfg.Test.Clock
	}
	e.probe = cfg.Test.Probe
	return &App{eng: e}, nil
}

// Mount records a mount: deliveries from src go to h under the options' policy. It
// only records: App.Validate and App.Run check it.
func (a *App) Mount(src Source, h Handler, opts ...MountOption) {
	cfg := defaultMountConfig()
	for _, o := range opts {
		if o != nil {
			o.applyMount(&cfg)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mounts = append(a.mounts, &mount{cfg: cfg, handler: h, index: len(a.mounts), src: src})
}

// Validate checks every mount and returns every refusal joined with errors.Join (each a
// *ConfigError naming the mount), or nil. Run calls it before starting anything.
func (a *App) Validate() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	if len(a.mounts) == 0 {
		errs = append(errs, &ConfigError{Problem: "no mounts: call App.Mount before Run"})
	}
	names := map[string]bool{}
	for _, m := range a.mounts {
		m.prepare(a.eng)
		errs = append(errs, m.validate()...)
		if names[m.name] {
			errs = append(errs, &ConfigError{Mount: m.name, Problem: "two mounts have this name; give one another with settle.Name"})
		}
		names[m.name] = true
	}
	return errors.Join(errs...)
}

// Run validates the mounts (returning every refusal at once, before anything starts),
// opens their sources and consumes until ctx is cancelled. Then it shuts down
// gracefully:
//
//  1. every mount stops reading (a read in progress ends within its block bound);
//  2. in-flight handlers get Config.DrainTimeout to finish; after that their contexts
//     are cancelled with the cause ErrDrainTimeout, and Run waits for them;
//  3. every outcome is settled, with settlement writes that do not depend on ctx, and
//     in-process delayed retries still waiting are written back at once;
//  4. Run returns nil.
//
// Run returns an error without consuming when validation or opening a source fails
// (every mount's, joined: opening a Redis source checks that its user may run every
// command the mount needs, and names each one refused); while a source's server cannot
// be reached, Run logs it and tries again with a backoff
// until it can, or ctx is done.
// An App runs once: a second Run returns ErrAppClosed.
// stoppedWhileOpening reports whether every error of the mounts' opens is ctx's own
// ending (Run's context ended while a transport opened): a stop, not a refusal.
func stoppedWhileOpening(ctx context.Context, errs []error) bool {
	if ctx.Err() == nil {
		return false
	}
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return false
		}
	}
	return true
}

func (a *App) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return ErrAppClosed
	}
	if err := a.Validate(); err != nil {
		return err
	}
	var opened []*mount
	var openErrs []error // every mount's, so that one Run names every refusal
	for _, m := range a.mounts {
		if err := m.open(ctx); err != nil {
			openErrs = append(openErrs, fmt.Errorf("settle: mount %s: open: %w", m.name, err))
			continue
		}
		opened = append(opened, m)
	}
	if len(openErrs) > 0 {
		for _, o := range opened {
			_ = o.transport.Close(context.WithoutCancel(ctx))
		}
		if stoppedWhileOpening(ctx, openErrs) {
			return nil // a graceful stop asked for before the mounts were open
		}
		return errors.Join(openErrs...)
	}
	a.warnPools(ctx)

	delays := timerq.New(a.eng.clock)
	stopDelays := make(chan struct{})
	leftDelays := make(chan []func(), 1)
	go func() { leftDelays <- delays.Run(stopDelays) }()
	if p := a.eng.probe; p != nil {
		p.attach(a.mounts, delays)
		defer p.attach(nil, nil)
	}

	var wg sync.WaitGroup
	for _, m := range a.mounts {
		wg.Go(func() { m.run(ctx, delays) })
	}
	wg.Wait()

	close(stopDelays)
	left := <-leftDelays
	if len(left) > 0 {
		a.eng.logger.InfoContext(ctx, "settle: shutdown: writing back delayed retries early", slog.Int("count", len(left)))
	}
	for _, fn := range left {
		fn()
	}
	a.eng.delayed.Wait()
	for _, m := range a.mounts {
		if err := m.transport.Close(context.WithoutCancel(ctx)); err != nil {
			a.eng.logger.WarnContext(ctx, "settle: close source", slog.String(attrMount, m.name), slog.Any(attrError, err))
		}
	}
	return nil
}
