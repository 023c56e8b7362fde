package settle

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/source"
)

func queuedDeliveries(n int) []*source.Delivery {
	ds := make([]*source.Delivery, n)
	for i := range ds {
		ds[i] = &source.Delivery{Attempt: 1, ID: strconv.Itoa(i) + "-0"}
	}
	return ds
}

// Workers are woken one at a time, each waking the next as it takes a delivery: while
// handlers block, every queued delivery still gets a worker of its own at once.
func TestWorkQueueStartsEveryQueuedDeliveryWhileTheHandlersBeforeItBlock(t *testing.T) {
	t.Parallel()
	const n = 50
	q := newWorkQueue(n)
	var wg sync.WaitGroup
	started := make(chan string, n)
	release := make(chan struct{})
	handle := func(d *source.Delivery) {
		if d.Attempt == 0 {
			return // warming up
		}
		started <- d.ID
		<-release
	}
	// Start n workers and let them all park: a push then wakes one only.
	warm := queuedDeliveries(n)
	for _, d := range warm {
		d.Attempt = 0
	}
	q.push(warm, n, &wg, func() func(*source.Delivery) { return handle })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		idle := q.idle
		q.mu.Unlock()
		if idle == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers parked", idle, n)
		}
	}
	q.push(queuedDeliveries(n), n, &wg, func() func(*source.Delivery) { return handle })
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case id := <-started:
			seen[id] = true
		case <-timeout:
			t.Fatalf("%d of %d handlers running at once, want all", len(seen), n)
		}
	}
	close(release)
	q.close()
	wg.Wait()
}

// close ends the workers only once they have handled every delivery queued before it,
// however few workers there are.
func TestWorkQueueCloseEndsWorkersOnceEveryQueuedDeliveryIsHandled(t *testing.T) {
	t.Parallel()
	const n = 100
	q := newWorkQueue(4) // fewer slots than deliveries: the ring grows
	var wg sync.WaitGroup
	var handled atomic.Int64
	handle := func(*source.Delivery) { handled.Add(1) }
	ds := queuedDeliveries(n)
	q.push(ds[:10], 1, &wg, func() func(*source.Delivery) { return handle })
	q.push(ds[10:], 2, &wg, func() func(*source.Delivery) { return handle })
	q.close()
	wg.Wait()
	if got := handled.Load(); got != n {
		t.Fatalf("handled %d of %d queued deliveries before the workers ended", got, n)
	}
}
