package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestConcurrencyRunsThatManyHandlersAtOnceAndNoMore: Concurrency(n) lets n handlers run
// at once, whichever workers took the deliveries, and never more: handlers that block
// are joined by others up to n, and every message is handled once they return.
func TestConcurrencyRunsThatManyHandlersAtOnceAndNoMore(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const n, total = 4, 13
	for i := range total {
		b.Publish(t, i, nil)
	}
	var (
		mu      sync.Mutex
		running int
		most    int
		handled int
		full    = make(chan struct{})
		release = make(chan struct{})
	)
	h := settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		mu.Lock()
		running++
		most = max(most, running)
		if running == n && handled == 0 {
			close(full)
		}
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		handled++
		mu.Unlock()
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Batch(2)), h, settle.Concurrency(n)))
	select {
	case <-full:
	case <-time.After(sourcetest.WaitBound):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d handlers running at once, want %d", running, n)
	}
	close(release)
	b.Rec.WaitFor(t, sourcetest.WaitBound, "every message acked", func(evs []settle.Settled) bool { return len(evs) == total })
	mu.Lock()
	defer mu.Unlock()
	if most != n || handled != total {
		t.Fatalf("at most %d handlers ran at once and %d were handled; want %d at once and all %d", most, handled, n, total)
	}
}
