package settle

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// fakeMarks is a source.Deduper whose first Completed call waits for release, so that
// the reads made meanwhile queue behind it.
type fakeMarks struct {
	entered chan struct{}
	err     error
	release chan struct{}

	mu    sync.Mutex
	calls [][]string
	done  map[string]bool
}

func (f *fakeMarks) Completed(_ context.Context, keys []string) ([]bool, error) {
	f.mu.Lock()
	f.calls = append(f.calls, append([]string(nil), keys...))
	first := len(f.calls) == 1
	f.mu.Unlock()
	if first {
		close(f.entered)
		<-f.release
	}
	out := make([]bool, len(keys))
	for i, k := range keys {
		out[i] = f.done[k]
	}
	return out, f.err
}

// The mark reads of deliveries that start while one is out share the next call, and
// each reader gets its own key's answer.
func TestDedupeReadsOfConcurrentDeliveriesShareOneCall(t *testing.T) {
	t.Parallel()
	f := &fakeMarks{entered: make(chan struct{}), release: make(chan struct{}), done: map[string]bool{"k1": true, "k3": true}}
	var b dedupReads
	ctx := context.Background()
	first := make(chan bool)
	go func() {
		done, _ := b.read(ctx, f, "k0")
		first <- done
	}()
	<-f.entered
	keys := []string{"k1", "k2", "k3", "k4"}
	got := make([]bool, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			done, err := b.read(ctx, f, k)
			if err != nil {
				t.Errorf("read %s: %v", k, err)
			}
			got[i] = done
		})
	}
	for { // every read queued behind the first call
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == len(keys) {
			break
		}
		runtime.Gosched()
	}
	close(f.release)
	wg.Wait()
	if <-first {
		t.Fatal("k0 read as done, want not")
	}
	for i, k := range keys {
		if got[i] != f.done[k] {
			t.Fatalf("%s read %v, want %v", k, got[i], f.done[k])
		}
	}
	if len(f.calls) != 2 || len(f.calls[1]) != len(keys) {
		t.Fatalf("calls %v, want the first key's, then the four queued meanwhile in one", f.calls)
	}
	if b.running || len(b.queue) != 0 {
		t.Fatal("a call is still marked out after every read was answered")
	}
}

// A failed call fails every read it carried.
func TestDedupeReadsFailTogether(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	f := &fakeMarks{entered: make(chan struct{}), release: make(chan struct{}), err: boom}
	close(f.release)
	var b dedupReads
	if _, err := b.read(context.Background(), f, "k"); !errors.Is(err, boom) {
		t.Fatalf("read = %v, want the call's error", err)
	}
}
