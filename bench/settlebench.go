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

// runSettle runs one settle App with one mount per worker (each its own consumer), every
// mount with Concurrency(rc.concurrency), counting settlements that are Final.
func runSettle(kind settleKind) runFunc {
	return func(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
		switch {
		case kind == settleStreamZset && sc.kind != kindDelay:
			return nil, errNA("same as settle-stream outside delays")
		case kind == settleClaiming && sc.kind == kindDelay:
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

		cnt := newCounter(rc.n)
		late := newLateness(rc.n)
		var failed atomic.Int64
		var firstErr atomic.Value
		app, err := settle.New(settle.Config{
			Logger:       slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1})),
			DrainTimeout: 5 * time.Second,
			OnSettled: func(_ context.Context, s settle.Settled) {
				if s.Err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, s.Err)
				}
				if s.Final() {
					cnt.add(1)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		h := settleHandler(sc, late, make([]atomic.Bool, rc.n))
		for w := range sc.workers {
			opts := []settle.MountOption{settle.Concurrency(rc.concurrency), settle.Name(fmt.Sprintf("w%d", w))}
			if sc.kind == kindDLQ {
				opts = append(opts, settle.MaxAttempts(3), settle.DeadLetter(dlq))
			}
			if kind == settleStreamZset {
				opts = append(opts, settle.DelayIn(delayed.DurableZset{Key: rc.prefix + "delayed"}))
			}
			consumer := settle.Consumer(fmt.Sprintf("c%d", w))
			var src settle.Source
			switch kind {
			case settleStream, settleStreamZset:
				src = settle.Stream(rdb, key, group, consumer)
			case settleClaiming:
				src = settle.ClaimingStream(rdb, key, group, claimMinIdle, consumer)
			case settleReliableList:
				src = settle.ReliableList(rdb, key, consumer)
			}
			app.Mount(src, h, opts...)
		}
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
		ranDone := false
		select {
		case <-cnt.done:
		case err = <-ran:
			ranDone = true
			err = fmt.Errorf("run returned early: %v", err)
		case <-time.After(rc.timeout):
			err = fmt.Errorf("timed out with %d of %d done", cnt.n.Load(), rc.n)
		}
		s, serr := rc.meter.stop(ctx, rc.n)
		cancel()
		if !ranDone {
			if rerr := <-ran; rerr != nil {
				err = errors.Join(err, fmt.Errorf("run: %w", rerr))
			}
		}
		if s != nil {
			s.late, s.back = late.values()
		}
		if n := failed.Load(); n > 0 && s != nil {
			// Not a failed run when every message still reached its final state: e.g. a
			// claiming stream's entry taken over by another consumer after min-idle, whose
			// late settlement is then refused (and the new owner settles it).
			s.note = fmt.Sprintf("%d settlements failed and were redelivered, first: %v", n, firstErr.Load())
		}
		return s, errors.Join(err, serr)
	}
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
