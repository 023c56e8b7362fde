package settle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
)

// claimWait bounds every wait for a signal in the claim, reclaim and seek tests; it is
// never slept.
const claimWait = 10 * time.Second

// claimWorld is one claim test's world: a Redis and, on miniredis, a paused fake clock
// that moves miniredis's clock with it. On a real server the clock is the wall clock,
// idle times are real, and advance does nothing: waits are bounded by claimWait.
type claimWorld struct {
	clock *claimClock // nil on a real server
	ctx   context.Context
	dlq   string
	group string
	idle  time.Duration // the min-idle the test uses: 30s on the fake clock, 100ms real
	in    string
	logs  *logtest.Sink
	r     *redistest.Redis
	rec   *claimRecorder
}

func setupClaimWorld(t *testing.T) *claimWorld {
	t.Helper()
	r := redistest.New(t)
	w := &claimWorld{
		ctx:   context.Background(),
		dlq:   r.Key("dlq"),
		group: "workers",
		idle:  100 * time.Millisecond,
		in:    r.Key("in"),
		logs:  logtest.New(),
		r:     r,
		rec:   &claimRecorder{wake: make(chan struct{})},
	}
	if r.Mini != nil {
		w.clock = newClaimClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), r.Mini)
		w.idle = 30 * time.Second
	}
	return w
}

// now is the time on the App's clock.
func (w *claimWorld) now() time.Time {
	if w.clock != nil {
		return w.clock.Now()
	}
	return time.Now()
}

// advance moves the fake clock (and miniredis) by d; on a real server time moves by
// itself.
func (w *claimWorld) advance(d time.Duration) {
	if w.clock != nil {
		w.clock.Advance(d)
	}
}

// app returns an App on the world's clock, logs and recorder, with one mount.
func (w *claimWorld) app(t *testing.T, src settle.Source, h settle.Handler, opts ...settle.MountOption) *settle.App {
	t.Helper()
	cfg := settle.Config{Logger: slog.New(w.logs), OnSettled: w.rec.OnSettled}
	if w.clock != nil {
		cfg.Test.Clock = w.clock
	}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	app.Mount(src, h, opts...)
	return app
}

// claiming returns a claiming stream on the world's stream with its min-idle.
func (w *claimWorld) claiming(opts ...settle.ClaimingStreamOption) *settle.ClaimingStreamSource {
	return settle.ClaimingStream(w.r.Client, w.in, w.group, w.idle, append([]settle.ClaimingStreamOption{settle.Block(50 * time.Millisecond)}, opts...)...)
}

// publish publishes v to the world's stream and returns the entry id.
func (w *claimWorld) publish(t *testing.T, v any, headers map[string]string) string {
	t.Helper()
	id, err := settle.NewPublisher(w.r.Client).Publish(w.ctx, w.in, v, settle.Headers(headers))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return id
}

// crash reads n entries as consumer name and never settles them: a worker that died
// holding them.
func (w *claimWorld) crash(t *testing.T, name string, n int) []string {
	t.Helper()
	if err := w.r.Client.XGroupCreateMkStream(w.ctx, w.in, w.group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.Fatalf("xgroup create: %v", err)
	}
	res, err := w.r.Client.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: w.group, Consumer: name, Streams: []string{w.in, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != n {
		t.Fatalf("xreadgroup as %s: %v %v", name, res, err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

// pendingEntry returns id's owner and delivery count, or ok false when it is not pending.
func (w *claimWorld) pendingEntry(t *testing.T, id string) (owner string, count int64, ok bool) {
	t.Helper()
	p, err := w.r.Client.XPendingExt(w.ctx, &redis.XPendingExtArgs{Stream: w.in, Group: w.group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		t.Fatalf("xpending %s: %v", id, err)
	}
	if len(p) == 0 {
		return "", 0, false
	}
	return p[0].Consumer, p[0].RetryCount, true
}

// pendingCount returns how many entries of the group are pending.
func (w *claimWorld) pendingCount(t *testing.T) int64 {
	t.Helper()
	p, err := w.r.Client.XPending(w.ctx, w.in, w.group).Result()
	if err != nil {
		t.Fatalf("xpending: %v", err)
	}
	return p.Count
}

// xlen returns the length of key.
func (w *claimWorld) xlen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := w.r.Client.XLen(w.ctx, key).Result()
	if err != nil {
		t.Fatalf("xlen %s: %v", key, err)
	}
	return n
}

// waitEvents waits until n settlements match pred and returns them.
func (w *claimWorld) waitEvents(t *testing.T, what string, n int, pred func(settle.Settled) bool) []settle.Settled {
	t.Helper()
	deadline := time.NewTimer(claimWait)
	defer deadline.Stop()
	for {
		w.rec.mu.Lock()
		evs, wake := append([]settle.Settled(nil), w.rec.events...), w.rec.wake
		w.rec.mu.Unlock()
		var got []settle.Settled
		for _, e := range evs {
			if pred(e) {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got
		}
		select {
		case <-wake:
		case <-deadline.C:
			var lines []string
			for _, l := range w.logs.Containing("") {
				lines = append(lines, fmt.Sprintf("%s %s %v", l.Level, l.Msg, l.Attrs))
			}
			logs := strings.Join(lines, "\n")
			t.Fatalf("timed out after %s waiting for %s; settlements: %+v\nlogs:\n%s", claimWait, what, evs, logs)
		}
	}
}

// events returns the settlements so far.
func (w *claimWorld) events() []settle.Settled {
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	return append([]settle.Settled(nil), w.rec.events...)
}

// claimRecorder keeps an App's settlements and wakes waiters on each.
type claimRecorder struct {
	mu     sync.Mutex
	events []settle.Settled
	wake   chan struct{}
}

func (r *claimRecorder) OnSettled(_ context.Context, s settle.Settled) {
	r.mu.Lock()
	r.events = append(r.events, s)
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// run runs app until the test ends.
func (w *claimWorld) run(t *testing.T, app *settle.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(claimWait):
			t.Errorf("Run did not return after its context was cancelled")
		}
	})
}

// attempts records what a handler saw: each delivery's id, attempt and clock time.
type attempts struct {
	mu   sync.Mutex
	seen []seen
}

type seen struct {
	at      time.Time
	attempt int
	id      string
}

func (a *attempts) add(m *settle.Message, at time.Time) {
	a.mu.Lock()
	a.seen = append(a.seen, seen{at: at, attempt: m.Attempt, id: m.ID})
	a.mu.Unlock()
}

func (a *attempts) all() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.seen...)
}

var errClaimTest = errors.New("handler failed")

// claimClock is a paused fake clock whose Advance also moves miniredis's clock.
type claimClock = clock.Fake

func newClaimClock(start time.Time, m *miniredis.Miniredis) *claimClock {
	m.SetTime(start)
	c := clock.NewFake(start)
	c.AfterAdvance = m.SetTime
	return c
}
