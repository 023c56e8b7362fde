package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/settletest"
)

// seed 002's backoff: a busy processor asks its callers to wait 30 s.
const backoff = 30 * time.Second

// delivery is what a handler saw.
type delivery struct {
	attempt int
	at      time.Time // on the harness's clock
	headers map[string]string
	payload []byte
}

// recorder is a handler that records each delivery and answers with fn.
type recorder struct {
	clock func() time.Time
	fn    func(m *settle.Message) error
	mu    sync.Mutex
	seen  []delivery
}

func (r *recorder) Handle(_ context.Context, m *settle.Message) error {
	r.mu.Lock()
	r.seen = append(r.seen, delivery{attempt: m.Attempt, at: r.clock(), headers: m.Headers, payload: m.Payload})
	r.mu.Unlock()
	return r.fn(m)
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// busyOnce asks for the backoff on the first delivery and acks the next.
func busyOnce(m *settle.Message) error {
	if m.Attempt == 1 {
		return settle.RetryAfter(backoff, errors.New("processor busy"))
	}
	return nil
}

func zsetMount(h *settletest.Harness, r *recorder, ttl time.Duration, opts ...settle.MountOption) (in, set string) {
	in, set = h.Redis.Key("in"), h.Redis.Key("delayed")
	r.clock = h.Clock.Now
	opts = append(opts, settle.DelayIn(delayed.DurableZset{Key: set, TTL: ttl}))
	h.Mount(settle.Stream(h.Redis.Client, in, "workers", settle.Block(time.Second)), r, opts...)
	return in, set
}

func TestDurableZsetParksCopyAndAcksOriginalInOneStep(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	r := &recorder{fn: busyOnce}
	in, set := zsetMount(h, r, time.Hour)
	h.Start()
	h.Publish(in, "refund-1", settle.Headers(map[string]string{"tenant": "a"}))
	evs := h.WaitAction(settle.ActionPark, 1)
	if e := evs[len(evs)-1]; e.Err != nil || e.Delay != backoff {
		t.Fatalf("park event = %+v, want applied with delay %s", e, backoff)
	}
	ctx := context.Background()
	members, err := h.Redis.Client.ZRangeWithScores(ctx, set, 0, -1).Result()
	if err != nil || len(members) != 1 {
		t.Fatalf("delay set = %v, %v; want one member", members, err)
	}
	if want := float64(h.Clock.Now().Add(backoff).UnixMilli()); members[0].Score != want {
		t.Fatalf("score = %v, want the due time %v", members[0].Score, want)
	}
	member := members[0].Member.(string)
	if !strings.Contains(member, settle.HeaderRetryCount) || !strings.Contains(member, "tenant") {
		t.Fatalf("member %q does not hold the copy's headers", member)
	}
	p, err := h.Redis.Client.XPending(ctx, in, "workers").Result()
	if err != nil || p.Count != 0 {
		t.Fatalf("pending = %+v, %v; want the original acknowledged", p, err)
	}
	ttl, err := h.Redis.Client.PTTL(ctx, set).Result()
	if err != nil || ttl <= 0 || ttl > time.Hour {
		t.Fatalf("set pttl = %v, %v; want the TTL set", ttl, err)
	}
}

// Seed 002's test story: a 30 s backoff passes instantly with Advance.
func TestBackoffPassesInstantlyWithAdvance(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		delay delayed.Strategy
	}{
		{name: "DurableZset", delay: delayed.DurableZset{}}, // Key filled below
		{name: "InProcess", delay: delayed.InProcess{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := settletest.New(t)
			r := &recorder{clock: h.Clock.Now, fn: busyOnce}
			in := h.Redis.Key("in")
			strategy := tc.delay
			if _, ok := strategy.(delayed.DurableZset); ok {
				strategy = delayed.DurableZset{Key: h.Redis.Key("delayed")}
			}
			h.Mount(settle.Stream(h.Redis.Client, in, "workers"), r, settle.DelayIn(strategy), settle.MaxAttempts(5))
			h.Start()
			start := h.Clock.Now()
			h.Publish(in, "refund-1")
			h.WaitAction(settle.ActionPark, 1)
			// The clock moves in three steps: a delivery before the last would be early.
			h.Advance(10 * time.Second)
			h.Advance(10 * time.Second)
			h.Advance(10 * time.Second)
			h.WaitAction(settle.ActionAck, 1)
			ds := r.deliveries()
			if len(ds) != 2 || ds[1].attempt != 2 {
				t.Fatalf("deliveries = %+v, want attempts 1 then 2", ds)
			}
			if got := ds[1].at.Sub(start); got < backoff {
				t.Fatalf("redelivered %s after the first delivery on the clock, want >= %s", got, backoff)
			}
		})
	}
}

func TestDurableZsetCountTravelsUnderMaxAttempts(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	r := &recorder{fn: func(*settle.Message) error { return settle.RetryAfter(time.Second, errors.New("busy")) }}
	dlq := h.Redis.Key("dlq")
	in, _ := zsetMount(h, r, 0, settle.MaxAttempts(3), settle.DeadLetter(dlq))
	h.Start()
	h.Publish(in, "refund-1")
	for k := 1; k <= 2; k++ {
		h.WaitAction(settle.ActionPark, k)
		h.Advance(time.Second)
	}
	h.WaitAction(settle.ActionDeadLetter, 1)
	var attempts []int
	for _, d := range r.deliveries() {
		attempts = append(attempts, d.attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Fatalf("attempts = %v, want [1 2 3]", attempts)
	}
	dead, err := h.Redis.Client.XRange(context.Background(), dlq, "-", "+").Result()
	if err != nil || len(dead) != 1 || dead[0].Values[settle.HeaderRetryCount] != "3" {
		t.Fatalf("dead letters = %v, %v; want one with retry count 3", dead, err)
	}
}

func TestDurableZsetKeepsBinaryPayloadsAsTheyArrived(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	r := &recorder{fn: busyOnce}
	in, _ := zsetMount(h, r, 0)
	h.Start()
	payload := []byte{0x00, 0xff, 0xc3, 0x28, '\n', ':', '7', 0x00}
	h.PublishBytes(in, payload, settle.Headers(map[string]string{"bin": "\x00\xfe"}))
	h.WaitAction(settle.ActionPark, 1)
	h.Advance(backoff)
	h.WaitAction(settle.ActionAck, 1)
	ds := r.deliveries()
	if len(ds) != 2 || string(ds[1].payload) != string(payload) || ds[1].headers["bin"] != "\x00\xfe" {
		t.Fatalf("redelivery = %+v, want payload %q and header kept", ds, payload)
	}
}

func TestDurableZsetSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := settletest.Redis(t)
	clk := settletest.NewClock(time.Now().Truncate(time.Millisecond))
	if srv.Mini != nil {
		clk.AttachMiniredis(srv.Mini)
	}

	// App 1 parks the delay and stops.
	h1 := settletest.New(t, settletest.WithRedis(srv), settletest.WithClock(clk))
	r1 := &recorder{fn: busyOnce}
	in, set := zsetMount(h1, r1, 0)
	h1.Start()
	h1.Publish(in, "refund-1", nil)
	h1.WaitAction(settle.ActionPark, 1)
	h1.Stop()
	if n, err := srv.Client.ZCard(context.Background(), set).Result(); err != nil || n != 1 {
		t.Fatalf("delay set holds %d, %v after App 1 stopped; want 1", n, err)
	}

	// App 2 on the same Redis delivers it when due.
	h2 := settletest.New(t, settletest.WithRedis(srv), settletest.WithClock(clk))
	r2 := &recorder{fn: busyOnce}
	zsetMount(h2, r2, 0)
	h2.Start()
	h2.Advance(backoff)
	h2.WaitAction(settle.ActionAck, 1)
	if ds := r2.deliveries(); len(ds) != 1 || ds[0].attempt != 2 {
		t.Fatalf("App 2 deliveries = %+v, want the parked copy at attempt 2", ds)
	}
	if n, _ := srv.Client.Exists(context.Background(), set).Result(); n != 0 {
		t.Fatalf("delay set still exists after the sweep")
	}
}

func TestDurableZsetDelayLongerThanTTLRetriesNow(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	r := &recorder{fn: func(m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.RetryAfter(time.Hour, errors.New("busy"))
		}
		return nil
	}}
	in, set := zsetMount(h, r, time.Minute)
	h.Start()
	h.Publish(in, "refund-1")
	// The copy's ack may be reported before the copy itself: wait for both.
	evs := h.WaitFor("the copy and its ack", func(evs []settle.Settled) bool {
		var copied, acked bool
		for _, e := range evs {
			copied = copied || e.Action == settle.ActionCopy
			acked = acked || e.Action == settle.ActionAck
		}
		return copied && acked
	})
	for _, e := range evs {
		if e.Action == settle.ActionPark || (e.Action == settle.ActionCopy && e.Outcome != settle.OutcomeRetryAfter) {
			t.Fatalf("settlements = %+v, want a copy (retry now) of the RetryAfter, never a park", evs)
		}
	}
	if n, _ := h.Redis.Client.Exists(context.Background(), set).Result(); n != 0 {
		t.Fatalf("the refused delay went into the set")
	}
}

func TestDurableZsetReadBlocksOnlyUntilDue(t *testing.T) {
	t.Parallel()
	h := settletest.New(t, settletest.Live())
	in, set := h.Redis.Key("in"), h.Redis.Key("delayed")
	r := &recorder{clock: time.Now, fn: func(m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.RetryAfter(200*time.Millisecond, nil)
		}
		return nil
	}}
	// A 3 s block: a sweep only at the end of each block would come back 3 s late.
	h.Mount(settle.Stream(h.Redis.Client, in, "workers", settle.Block(3*time.Second)), r,
		settle.DelayIn(delayed.DurableZset{Key: set}))
	h.Start()
	h.Publish(in, "refund-1")
	h.WaitAction(settle.ActionAck, 1)
	ds := r.deliveries()
	if got := ds[1].at.Sub(ds[0].at); got < 200*time.Millisecond || got > 1500*time.Millisecond {
		t.Fatalf("redelivered %s after the first delivery, want soon after the 200ms delay, long before the 3s block ends", got)
	}
}

func TestDurableZsetValidate(t *testing.T) {
	t.Parallel()
	srv := settletest.Redis(t)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	noop := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })

	tests := []struct {
		name    string
		rdb     redis.UniversalClient
		stream  string
		opts    []settle.MountOption
		wantErr string
	}{
		{name: "NegativeTTLRefused", rdb: srv.Client, stream: "{a}:in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "{a}:d", TTL: -time.Second})}, wantErr: "TTL must not be negative"},
		{name: "EmptyKeyRefused", rdb: srv.Client, stream: "{a}:in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{})}, wantErr: "Key is empty"},
		{name: "SetIsTheStreamRefused", rdb: srv.Client, stream: "{a}:in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "{a}:in"})}, wantErr: "the delay set's key is the stream's"},
		{name: "ClusterCrossSlotSetRefused", rdb: cluster, stream: "refunds.in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "refunds.delayed"})}, wantErr: "must share a slot"},
		{name: "ClusterCrossSlotDeadLetterRefused", rdb: cluster, stream: "{refunds}:in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "{refunds}:delayed"}), settle.DeadLetter("refunds.dlq")}, wantErr: "stream and DeadLetter must share a cluster slot"},
		{name: "ClusterHashTaggedAccepted", rdb: cluster, stream: "{refunds}:in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "{refunds}:delayed"}), settle.DeadLetter("{refunds}:dlq")}},
		{name: "StandaloneCrossSlotAccepted", rdb: srv.Client, stream: "refunds.in", opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "refunds.delayed", TTL: time.Hour})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(settle.Stream(tt.rdb, tt.stream, "g"), noop, tt.opts...)
			err = app.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
			var ce *settle.ConfigError
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want *ConfigError", err)
			}
		})
	}
}

// TestDurableZsetLateness measures, on a real Redis, how late 1,000 messages delayed 1 s
// through a DurableZset come back, against two bounds of the due time: the first
// handler's return + 1 s (so the figure includes the park itself, queued behind the
// burst's other parks) and the park's own settlement event + 1 s (the park script read
// Redis TIME just before: the figure is the sweep-and-read lateness, give or take a round
// trip). It only logs p50/p99/max; run with -v:
//
//	SETTLE_REDIS_URL=redis://127.0.0.1:6379/0 go test -run TestDurableZsetLateness -v .
func TestDurableZsetLateness(t *testing.T) {
	redistest.RealOnly(t)
	const n, delay = 1000, time.Second
	var mu sync.Mutex
	first := make(map[string]string, n)     // payload key -> the first delivery's id
	parked := make(map[string]time.Time, n) // first delivery's id -> park event time
	due := make(map[string]time.Time, n)
	var late, lateFromPark []time.Duration
	h := settletest.New(t, settletest.Live(), settletest.WaitTimeout(time.Minute),
		settletest.WithConfig(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Action == settle.ActionPark && s.Err == nil {
				mu.Lock()
				parked[s.ID] = time.Now()
				mu.Unlock()
			}
		}}))
	in, set := h.Redis.Key("in"), h.Redis.Key("delayed")
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		key := m.Headers["n"]
		mu.Lock()
		defer mu.Unlock()
		if m.Attempt == 1 {
			due[key] = time.Now().Add(delay)
			first[key] = m.ID
			return settle.RetryAfter(delay, nil)
		}
		late = append(late, time.Since(due[key]))
		if p, ok := parked[first[key]]; ok {
			lateFromPark = append(lateFromPark, time.Since(p.Add(delay)))
		}
		return nil
	}), settle.DelayIn(delayed.DurableZset{Key: set}), settle.Concurrency(50))
	h.Start()
	pipe := h.Redis.Client.Pipeline()
	for i := 0; i < n; i++ {
		payload, _ := settle.Msgpack.Marshal(i)
		pipe.XAdd(context.Background(), streamArgs(in, payload, strconv.Itoa(i)))
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.WaitAction(settle.ActionAck, n)
	mu.Lock()
	defer mu.Unlock()
	report := func(what string, late []time.Duration) {
		if len(late) == 0 {
			t.Fatalf("%s: no figures", what)
		}
		slices.Sort(late)
		pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))].Round(100 * time.Microsecond) }
		t.Logf("durable delay lateness beyond due (%s), %d messages delayed %s: p50 %s, p99 %s, max %s",
			what, len(late), delay, pct(0.50), pct(0.99), pct(1))
	}
	report("due from the handler's return", late)
	report("due from the park", lateFromPark)
}

func streamArgs(key string, payload []byte, n string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: key, Values: []any{"payload", payload, "n", n}}
}

// TestClusterSlotRefusalNamesTheDeadLetterKeyOnceAndNotTheDelaySet: a stream whose
// delay set shares its slot and whose dead-letter stream does not is refused once, for
// the dead-letter stream alone, with a valid key to use; the delay set (in the stream's
// slot) is not blamed.
func TestClusterSlotRefusalNamesTheDeadLetterKeyOnceAndNotTheDelaySet(t *testing.T) {
	t.Parallel()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	app, err := settle.New(settle.Config{})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(cluster, "{orders}:in", "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.DelayIn(delayed.DurableZset{Key: "{orders}:delayed"}), settle.DeadLetter("orders:dlq"))
	err = app.Validate()
	if err == nil {
		t.Fatal("Validate = nil; want the dead-letter stream refused")
	}
	msg := err.Error()
	if strings.Count(msg, `"orders:dlq"`) != 1 || strings.Contains(msg, "{orders}:delayed") || !strings.Contains(msg, `"{orders}:dlq"`) || strings.Contains(msg, "{{") {
		t.Fatalf("Validate = %v; want orders:dlq named once with {orders}:dlq to use, the delay set not blamed", err)
	}
}
