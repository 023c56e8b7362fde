package settle

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// waitQueued waits until n calls are queued in b.
func waitQueued[T any](t *testing.T, b *batcher[T], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n)
		}
	}
}

// The calls made while a round is being sent go together in the next round, at most
// max per round, each answered with its own error; a round answered short fails the
// calls it left out.
func TestBatcherSendsTheCallsQueuedMeanwhileTogetherEachAnsweredOnItsOwn(t *testing.T) {
	t.Parallel()
	var b batcher[int]
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var rounds [][]int
	send := func(_ context.Context, reqs []int) []error {
		mu.Lock()
		rounds = append(rounds, slices.Clone(reqs))
		first := len(rounds) == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		errs := make([]error, 0, len(reqs))
		for _, r := range reqs {
			if r == 6 {
				break // answered short from here
			}
			if r%2 == 1 {
				errs = append(errs, fmt.Errorf("odd %d", r))
			} else {
				errs = append(errs, nil)
			}
		}
		return errs
	}
	const n, max = 7, 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = b.do(context.Background(), 0, max, send) })
	<-entered
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = b.do(context.Background(), i, max, send) })
		waitQueued(t, &b, i) // queued in order
	}
	close(release)
	wg.Wait()
	if want := [][]int{{0}, {1, 2, 3, 4}, {5, 6}}; !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Fatalf("rounds %v, want %v", rounds, want)
	}
	for i, err := range errs {
		switch {
		case i == 6:
			if !errors.Is(err, errShortMoves) {
				t.Fatalf("call 6 = %v, want errShortMoves", err)
			}
		case i%2 == 1:
			if err == nil || err.Error() != fmt.Sprintf("odd %d", i) {
				t.Fatalf("call %d = %v, want its own error", i, err)
			}
		case err != nil:
			t.Fatalf("call %d = %v, want nil", i, err)
		}
	}
}
