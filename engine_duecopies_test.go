package settle

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
)

// In-process delays that come due together are written together: the copies due while
// one Moves call is under way go in the next, each reported on its own once written.
func TestDueInProcessCopiesAreWrittenInBatches(t *testing.T) {
	t.Parallel()
	ids := []string{"1-0", "2-0", "3-0", "4-0", "5-0"}
	tr := newMoverTransport(ids...)
	evs := make(chan Settled, 2*len(ids))
	a, err := New(Config{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnSettled: func(_ context.Context, s Settled) { evs <- s },
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Mount(tr, HandlerFunc(func(context.Context, *Message) error {
		return RetryAfter(time.Millisecond, nil)
	}), Concurrency(len(ids)), DelayIn(delayed.InProcess{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tr.gate:
		default:
			close(tr.gate)
		}
		<-done
	})

	select {
	case <-tr.entered:
	case <-time.After(copierWaitBound):
		t.Fatal("no Moves call for the due copies")
	}
	// The first call is held: the other copies queue meanwhile.
	w := a.mounts[0].due
	for deadline := time.Now().Add(copierWaitBound); time.Now().Before(deadline); runtime.Gosched() {
		tr.mu.Lock()
		first := tr.calls[0]
		tr.mu.Unlock()
		w.mu.Lock()
		queued := len(w.queue)
		w.mu.Unlock()
		if first+queued == len(ids) {
			break
		}
	}
	close(tr.gate)
	parks, copies := 0, 0
	for range 2 * len(ids) {
		switch e := nextEvent(t, evs); {
		case e.Action == ActionPark:
			parks++
		case e.Action == ActionCopy && e.Err == nil:
			copies++
		default:
			t.Fatalf("settlement %+v, want a park, then its due copy written", e)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if parks != len(ids) || copies != len(ids) || len(tr.written) != len(ids) || len(tr.calls) > 2 {
		t.Fatalf("%d parks, %d copies reported; moves written %v in calls %v: want all %d copies in at most two calls (those due first, then those due meanwhile)", parks, copies, tr.written, tr.calls, len(ids))
	}
}

func nextEvent(tb testing.TB, evs chan Settled) Settled {
	tb.Helper()
	select {
	case e := <-evs:
		return e
	case <-time.After(copierWaitBound):
		tb.Fatal("no settlement reported")
		return Settled{}
	}
}
