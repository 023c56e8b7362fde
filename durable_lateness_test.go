package settle_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/settletest"
)

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
