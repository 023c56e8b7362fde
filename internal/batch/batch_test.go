package batch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// recorder runs batches: it records each one's items and answers each item with an
// error naming it.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) run(_ context.Context, items []int) []error {
	r.mu.Lock()
	r.batches = append(r.batches, append([]int(nil), items...))
	r.mu.Unlock()
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = fmt.Errorf("item %d", it)
	}
	return errs
}

func (r *recorder) all() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.batches...)
}

func newClock() *clock.Fake { return clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)) }

// doAll runs Do for items 1..n at once and returns each call's result by item.
func doAll(ctx context.Context, g *Gatherer[int], clk clock.Clock, n int) map[int]string {
	var mu sync.Mutex
	got := map[int]string{}
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			err := g.Do(ctx, clk, i)
			mu.Lock()
			got[i] = err.Error()
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

func TestABatchNeverExceedsItsSizeAndEachCallGetsItsOwnResult(t *testing.T) {
	t.Parallel()
	var r recorder
	g := New(3, time.Hour, r.run) // only full batches run: the clock never moves
	got := doAll(t.Context(), g, newClock(), 9)
	total := 0
	for _, b := range r.all() {
		if len(b) > 3 {
			t.Fatalf("a batch of %d items %v, want at most 3", len(b), b)
		}
		total += len(b)
	}
	if total != 9 {
		t.Fatalf("batches %v hold %d items, want 9", r.all(), total)
	}
	for i := 1; i <= 9; i++ {
		if want := fmt.Sprintf("item %d", i); got[i] != want {
			t.Fatalf("call %d got %q, want %q: its own item's result", i, got[i], want)
		}
	}
}

func TestTheLingerBoundsHowLongTheFirstItemWaits(t *testing.T) {
	t.Parallel()
	var r recorder
	clk := newClock()
	clk.Made = make(chan struct{}, 1)
	const linger = time.Second
	g := New(10, linger, r.run)
	done := make(chan error, 1)
	go func() { done <- g.Do(t.Context(), clk, 1) }()
	<-clk.Made // the first item waits on its linger
	clk.Advance(linger - time.Millisecond)
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d timers pending, want the linger's still waiting before it passed", n)
	}
	if b := r.all(); len(b) != 0 {
		t.Fatalf("ran %v before the linger passed", b)
	}
	clk.Advance(time.Millisecond)
	select {
	case err := <-done:
		if err == nil || err.Error() != "item 1" {
			t.Fatalf("got %v, want the item's own result", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batch did not run once its linger passed")
	}
	if b := r.all(); len(b) != 1 || len(b[0]) != 1 {
		t.Fatalf("ran %v, want one batch of the one item", b)
	}
}

func TestAFullBatchRunsWithoutWaitingForItsLinger(t *testing.T) {
	t.Parallel()
	var r recorder
	g := New(2, time.Hour, r.run)
	doAll(t.Context(), g, newClock(), 2) // returns: the clock never moves
	if b := r.all(); len(b) != 1 || len(b[0]) != 2 {
		t.Fatalf("ran %v, want one batch of 2", b)
	}
}

func TestABatchWhoseOpenersContextEndsRunsAtOnce(t *testing.T) {
	t.Parallel()
	var r recorder
	clk := newClock()
	clk.Made = make(chan struct{}, 1)
	g := New(5, time.Hour, r.run)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, clk, 1) }()
	<-clk.Made
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch waited out its linger after its opener's context ended")
	}
	if clk.Pending() != 0 {
		t.Fatal("the linger's timer was not stopped")
	}
}

func TestASizeOfOneRunsEachItemAtOnce(t *testing.T) {
	t.Parallel()
	var r recorder
	g := New(1, time.Hour, r.run)
	doAll(t.Context(), g, newClock(), 3)
	for _, b := range r.all() {
		if len(b) != 1 {
			t.Fatalf("ran %v, want batches of 1", r.all())
		}
	}
}
