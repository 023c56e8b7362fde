package redistest

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// OpenTransport makes a transport with make, for a mount named "test" with policy on the
// wall clock, opens it and closes it when the test ends.
func OpenTransport[T source.Transport](t testing.TB, make func(env source.Env) source.Transport, policy source.Policy) T {
	t.Helper()
	env := source.Env{Clock: clock.Real{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Mount: "test", Policy: policy}
	tr := make(env).(T)
	ctx := context.Background()
	if err := tr.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(ctx) })
	return tr
}

// FetchN fetches from tr until it has n deliveries (10 s at most).
func FetchN(t testing.TB, tr source.Transport, n int) []*source.Delivery {
	t.Helper()
	var got []*source.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(got) < n; {
		ds, err := tr.Fetch(context.Background(), 10, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
		if time.Now().After(deadline) {
			t.Fatalf("fetched %d deliveries, want %d", len(got), n)
		}
	}
	return got
}

// Hooked returns a client of r's server with hook h.
func (r *Redis) Hooked(t testing.TB, h redis.Hook) *redis.Client {
	t.Helper()
	o := r.Client.Options()
	client := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username})
	client.AddHook(h)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// ListMoveCalls is a go-redis hook that records how many moves each list_move script
// call on one processing list (EVALSHA whose first key is that list) carried. The first
// call runs hold first, when set.
type ListMoveCalls struct {
	Hold       func()
	Processing string

	mu    sync.Mutex
	calls []int
	once  sync.Once
}

// DialHook, ProcessHook and ProcessPipelineHook make it a redis.Hook.
func (h *ListMoveCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ListMoveCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if strings.EqualFold(cmd.Name(), "evalsha") && len(args) > 3 && args[3] == h.Processing {
			numKeys, _ := args[2].(int)
			h.mu.Lock()
			h.calls = append(h.calls, (len(args)-3-numKeys)/3)
			h.mu.Unlock()
			if h.Hold != nil {
				h.once.Do(h.Hold)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *ListMoveCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Recorded returns how many moves each call carried, in order.
func (h *ListMoveCalls) Recorded() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}
