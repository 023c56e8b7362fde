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
// through a DurableZset come back: from the first handler's return + 1 s (an upper bound
// of the due time, so the figures include the park itself) to the redelivery. It only
// logs p50/p99/max; run with -v:
//
//	SETTLE_REDIS_URL=redis://127.0.0.1:6379/0 go test -run TestDurableZsetLateness -v .
func TestDurableZsetLateness(t *testing.T) {
	redistest.RealOnly(t)
	const n, delay = 1000, time.Second
	h := settletest.New(t, settletest.Live(), settletest.WaitTimeout(time.Minute),
		settletest.WithConfig(settle.Config{Logger: slog.New(slog.DiscardHandler)}))
	in, set := h.Redis.Key("in"), h.Redis.Key("delayed")
	var mu sync.Mutex
	due := make(map[string]time.Time, n)
	var late []time.Duration
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		key := m.Headers["n"]
		mu.Lock()
		defer mu.Unlock()
		if m.Attempt == 1 {
			due[key] = time.Now().Add(delay)
			return settle.RetryAfter(delay, nil)
		}
		late = append(late, time.Since(due[key]))
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
	slices.Sort(late)
	pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))] }
	t.Logf("durable delay lateness beyond due, %d messages delayed %s: p50 %s, p99 %s, max %s",
		len(late), delay, pct(0.50).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), late[len(late)-1].Round(100*time.Microsecond))
}

func streamArgs(key string, payload []byte, n string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: key, Values: []any{"payload", payload, "n", n}}
}
