package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
)

// settleKind is which settle source a row runs.
type settleKind int

const (
	settleStream settleKind = iota
	settleStreamZset
	settleClaiming
	settleReliableList
)

// claimMinIdle is the claiming stream's min-idle in the benchmark: how long a retry
// waits before it is claimed back.
const claimMinIdle = 100 * time.Millisecond

var errHandler = errors.New("bench: handler failed")

// settleOpts is how a settle row mounts its source: the options the row is named after.
type settleOpts struct {
	name        string        // the row's name ends with it: default, c1, c8, tuned-c200
	concurrency int           // Concurrency(n) of each mount; 0: none given (settle's default)
	perWorker   bool          // one mount per scenario worker, each its own consumer (tuned)
	otel        bool          // settleotel installed: metrics and traces on, in memory (see otelbench.go)
	otelSample  float64       // the root share of the user's sampler, ParentBased(TraceIDRatioBased); 0: the SDK's default, every delivery
	batch       int           // a batch handler (settle.HandleBatch) of this size, its Concurrency the same; 0: a per-message handler
	writeCost   time.Duration // how long each handler call (each batch, for a batch handler) waits, as a database write would; 0: none
	dedupe      bool          // Dedupe(time.Hour, the message's id): every key new, so every handler runs (the check's and the mark's cost)
}

// batchLinger is the batch row's linger: at a drain, batches fill long before it.
const batchLinger = 10 * time.Millisecond

// settleOptionRows are the option sets every settle source runs with: what users run
// (the defaults, Concurrency(1), Concurrency(8), one mount each) and the tuned row, the
// defaults and the tuned row also with settleotel installed.
func settleOptionRows(tuned int) []settleOpts {
	return []settleOpts{
		{name: "default"},
		{name: "default-otel", otel: true},
		{name: "default-otel-1pct", otel: true, otelSample: 0.01},
		{name: "c1", concurrency: 1},
		{name: "c8", concurrency: 8},
		{name: "dedupe", dedupe: true},
		{name: fmt.Sprintf("tuned-c%d", tuned), concurrency: tuned, perWorker: true},
		{name: fmt.Sprintf("tuned-c%d-otel", tuned), concurrency: tuned, perWorker: true, otel: true},
		{name: fmt.Sprintf("tuned-c%d-otel-1pct", tuned), concurrency: tuned, perWorker: true, otel: true, otelSample: 0.01},
		{name: "batch100", concurrency: 100, batch: 100},
		{name: "c8-write1ms", concurrency: 8, writeCost: time.Millisecond},
		{name: "batch100-write1ms", concurrency: 100, batch: 100, writeCost: time.Millisecond},
	}
}

// fits reports whether the row runs in sc: beside the raw loop with as many goroutines
// handling (Concurrency(1) beside raw K=1; the defaults and Concurrency(8) beside raw
// K>1, 8 unless -k says otherwise); the tuned row has one mount per worker, so it fits
// every scenario. A durable delay set only matters in the delay scenario.
func (o settleOpts) fits(kind settleKind, sc scenario) bool {
	switch {
	case kind == settleStreamZset && sc.kind != kindDelay:
		return false // the same as settle-stream outside delays
	case o.batch > 0 || o.writeCost > 0:
		// Beside the per-message rows of a plain stream's drain: the cost of gathering,
		// and what a batch saves when each call writes to a database.
		return kind == settleStream && sc.kind == kindDrain && sc.workers > 1
	case o.otel:
		// Beside the row it is measured against (the defaults or the tuned row): a
		// plain stream, draining and retrying (the cost of the hooks, the metrics and a
		// span per delivery).
		return kind == settleStream && (sc.kind == kindDrain || sc.kind == kindRetry) && (o.perWorker || sc.workers > 1)
	case o.dedupe:
		// Beside the defaults, draining: the cost of the mark's read and write.
		return kind != settleStreamZset && sc.kind == kindDrain && sc.workers > 1
	case o.perWorker:
		return true
	case o.concurrency == 1:
		return sc.workers == 1
	default:
		return sc.workers > 1
	}
}

// describe says what the row runs with in sc: its mounts and options, including the
// options the scenario needs.
func (o settleOpts) describe(kind settleKind, sc scenario) string {
	var d string
	switch {
	case o.perWorker:
		d = fmt.Sprintf("%d mounts (one per worker), Concurrency(%d) each", sc.workers, o.concurrency)
		if sc.workers == 1 {
			d = fmt.Sprintf("1 mount, Concurrency(%d)", o.concurrency)
		}
	case o.batch > 0:
		d = fmt.Sprintf("1 mount, HandleBatch(%d, %s), Concurrency(%d)", o.batch, batchLinger, o.concurrency)
	case o.concurrency == 0:
		d = fmt.Sprintf("1 mount, defaults (Concurrency %d)", settle.DefaultConcurrency)
	default:
		d = fmt.Sprintf("1 mount, Concurrency(%d)", o.concurrency)
	}
	if o.writeCost > 0 {
		d += fmt.Sprintf(", each handler call waits %s (a database write)", o.writeCost)
	}
	if sc.kind == kindDLQ {
		d += ", MaxAttempts(3), DeadLetter"
	}
	if kind == settleStreamZset {
		d += ", DelayIn(DurableZset)"
	}
	if o.dedupe {
		d += ", Dedupe(1h, the message's id: every key new)"
	}
	switch {
	case o.otel && o.otelSample > 0:
		d += fmt.Sprintf(", settleotel (metrics, and traces of %g%% of messages: the SDK's ParentBased(TraceIDRatioBased), in memory)", 100*o.otelSample)
	case o.otel:
		d += ", settleotel (metrics and traces of every delivery, in memory)"
	}
	return d
}

// runSettle runs one settle App of kind with the row's options, counting settlements
// that are Final. A one-mount row gives no option but what the scenario needs (no
// Consumer, no Name); the tuned row mounts one consumer per worker.
func runSettle(kind settleKind, o settleOpts) runFunc {
	return func(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
		if kind == settleClaiming && sc.kind == kindDelay {
			return nil, errNA("a claiming stream's delay is its min-idle")
		}
		rdb := rc.client()
		defer rdb.Close()
		key, dlq, group := rc.prefix+"in", rc.prefix+"dlq", "g"
		var err error
		if kind == settleReliableList {
			err = publishList(ctx, rdb, key, rc.n)
		} else {
			err = publishStream(ctx, rdb, key, rc.n, func(i int) []any { return []any{"payload", payload(i)} })
		}
		if err != nil {
			return nil, err
		}

		b := newAppBench(rc.n)
		if o.otel {
			if b.hooks, err = otelHooks(o.otelSample); err != nil {
				return nil, err
			}
		}
		app, err := b.app()
		if err != nil {
			return nil, err
		}
		h := settleHandler(sc, b.late, make([]atomic.Bool, rc.n))
		switch {
		case o.batch > 0:
			h = settle.HandleBatch(o.batch, batchLinger, func(context.Context, []*settle.Message) error {
				time.Sleep(o.writeCost) // one write for the whole batch
				return nil
			})
		case o.writeCost > 0:
			h = settle.HandlerFunc(func(context.Context, *settle.Message) error {
				time.Sleep(o.writeCost) // one write per message
				return nil
			})
		}
		mounts := 1
		if o.perWorker {
			mounts = sc.workers
		}
		for w := range mounts {
			var opts []settle.MountOption
			if o.concurrency > 0 {
				opts = append(opts, settle.Concurrency(o.concurrency))
			}
			if o.perWorker {
				opts = append(opts, settle.Name(fmt.Sprintf("w%d", w)))
			}
			if o.dedupe {
				opts = append(opts, settle.Dedupe(time.Hour, func(m *settle.Message) string { return m.ID }))
			}
			if sc.kind == kindDLQ {
				opts = append(opts, settle.MaxAttempts(3), settle.DeadLetter(dlq))
			}
			if kind == settleStreamZset {
				opts = append(opts, settle.DelayIn(delayed.DurableZset{Key: rc.prefix + "delayed"}))
			}
			var src settle.Source
			switch kind {
			case settleStream, settleStreamZset:
				src = settle.Stream(rdb, key, group, consumer[settle.StreamOption](o, w)...)
			case settleClaiming:
				src = settle.ClaimingStream(rdb, key, group, claimMinIdle, consumer[settle.ClaimingStreamOption](o, w)...)
			case settleReliableList:
				src = settle.ReliableList(rdb, key, consumer[settle.ReliableListOption](o, w)...)
			}
			app.Mount(src, h, opts...)
		}
		return b.run(ctx, rc, sc, app)
	}
}

// consumer is the Consumer option of the tuned row's mount w (each mount its own
// consumer), or none: a one-mount row keeps settle's default consumer name.
func consumer[T any](o settleOpts, w int) []T {
	if !o.perWorker {
		return nil
	}
	return []T{any(settle.Consumer(fmt.Sprintf("c%d", w))).(T)}
}

// appBench counts one settle App's final settlements and what went wrong.
type appBench struct {
	cnt      *counter
	late     *lateness
	failed   atomic.Int64
	firstErr atomic.Value
	hooks    settle.Hooks // settleotel's, in the -otel rows
}

func newAppBench(n int) *appBench {
	return &appBench{cnt: newCounter(n), late: newLateness(n)}
}

// app returns an App whose settlements the bench counts; its logs go to io.Discard at
// the default level (Info), so a line the defaults write is built and costs what it
// costs, but printing it is not what is measured.
func (b *appBench) app() (*settle.App, error) {
	return settle.New(settle.Config{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		DrainTimeout: 5 * time.Second,
		Hooks:        b.hooks,
		OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Err != nil {
				b.failed.Add(1)
				b.firstErr.CompareAndSwap(nil, s.Err)
			} else {
				b.cnt.settled.Add(1)
			}
			if s.Final() {
				b.cnt.add(1)
			}
		},
	})
}

// run validates and runs app until every message is final, the run's cap passes (SQL
// rows: the rate is then over the messages done, see runCtx.done), or its timeout; then
// stops it.
func (b *appBench) run(ctx context.Context, rc *runCtx, sc scenario, app *settle.App) (*sample, error) {
	if err := app.Validate(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := rc.meter.start(ctx); err != nil {
		return nil, err
	}
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()
	var err error
	ranDone, capped := false, false
	select {
	case <-b.cnt.done:
	case err = <-ran:
		ranDone = true
		err = fmt.Errorf("run returned early: %v", err)
	case <-rc.capTimer():
		capped = true
	case <-time.After(rc.timeout):
		err = fmt.Errorf("timed out with %d of %d done", b.cnt.n.Load(), rc.n)
	}
	s, serr := rc.meter.stop(ctx, rc.done(b.cnt, sc, capped))
	cancel()
	if !ranDone {
		if rerr := <-ran; rerr != nil {
			err = errors.Join(err, fmt.Errorf("run: %w", rerr))
		}
	}
	if s != nil {
		s.late, s.back = b.late.values()
		s.capped = capped
		if n := b.failed.Load(); n > 0 {
			// Not a failed run when every message still reached its final state: e.g. a
			// claiming stream's entry taken over by another consumer after min-idle, whose
			// late settlement is then refused (and the new owner settles it).
			s.note = fmt.Sprintf("%d settlements failed and were redelivered, first: %v", n, b.firstErr.Load())
		}
	}
	return s, errors.Join(err, serr)
}

// settleHandler is the scenario's handler: no-op, retry once, delay once, or fail the
// 10% failing messages every time. Retry-once marks each message retried by its index
// (a reliable list puts an uncapped retry back as it is, with its attempt unchanged).
func settleHandler(sc scenario, late *lateness, retried []atomic.Bool) settle.Handler {
	return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		switch sc.kind {
		case kindRetry:
			if i := index(m.Payload); i >= 0 && i < len(retried) && !retried[i].Swap(true) {
				return settle.Retry(nil)
			}
		case kindDelay:
			if m.Attempt == 1 {
				late.setDue(index(m.Payload), time.Now().Add(time.Second))
				return settle.RetryAfter(time.Second, nil)
			}
			late.seen(index(m.Payload), time.Now())
			late.written(index(m.Payload), m.ID)
		case kindDLQ:
			if failing(index(m.Payload)) {
				return errHandler
			}
		}
		return nil
	})
}
