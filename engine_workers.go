package settle

import (
	"sync"

	"github.com/settlekit/settle/internal/source"
)

// workQueue hands a mount's deliveries to its workers: goroutines that live on from one
// delivery to the next, at most Concurrency of them, started as needed and ended by
// close once the queue is empty.
//
// A queued delivery always finds a worker: each delivery holds a slot until it is
// handled and the read loop starts a worker per slot held, so while one is queued some
// worker is idle, searching or about to come back for it. A worker that finishes its
// handler takes the next queued delivery without parking.
//
// Workers are woken one at a time, as Go's scheduler wakes its spinning threads: a push
// wakes one idle worker when none is already searching (woken and not yet holding a
// delivery), and a worker that takes a delivery and leaves more queued wakes the next
// one before it runs its handler. When handlers block, the wake-ups chain through the
// queue and every delivery starts at once; when they are quick, the few workers awake
// take the batch between them and the rest stay parked. A channel send per delivery
// woke a parked worker for every one (a goroutine switch, a scheduler wake-up and its
// lock), the largest cost of draining a stream after go-redis's reply parsing.
type workQueue struct {
	mu        sync.Mutex
	wake      sync.Cond          // idle workers wait on it; L is &mu
	buf       []*source.Delivery // a ring: n deliveries from head
	head, n   int
	idle      int  // workers waiting on wake that no one woke yet
	searching int  // workers woken (or started) that have not taken a delivery yet
	started   int  // workers started
	closed    bool // no more pushes: workers end once the queue is empty
}

func newWorkQueue(size int) *workQueue {
	q := &workQueue{buf: make([]*source.Delivery, max(size, 1))}
	q.wake.L = &q.mu
	return q
}

// push queues ds, first starting workers (on wg, each running the handle that start
// gives it on the deliveries it takes) until there are at least want, and wakes a
// worker if none is searching.
func (q *workQueue) push(ds []*source.Delivery, want int, wg *sync.WaitGroup, start func() func(*source.Delivery)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.started < want {
		q.started++
		q.searching++ // a new worker looks at the queue first thing
		wg.Go(func() { q.work(start()) })
	}
	for _, d := range ds {
		if q.n == len(q.buf) {
			q.grow()
		}
		q.buf[(q.head+q.n)%len(q.buf)] = d
		q.n++
	}
	q.wakeIfNoneSearching()
}

// grow doubles the ring. The read loop queues no more deliveries than its slots, the
// ring's size, so this is only a safeguard.
func (q *workQueue) grow() {
	buf := make([]*source.Delivery, 2*len(q.buf))
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// wakeIfNoneSearching wakes an idle worker for the queued deliveries unless one is
// already searching. q.mu is held.
func (q *workQueue) wakeIfNoneSearching() {
	if q.n > 0 && q.searching == 0 && q.idle > 0 {
		q.idle--
		q.searching++
		q.wake.Signal()
	}
}

// takeQueued removes and returns the deliveries no worker has taken yet.
func (q *workQueue) takeQueued() []*source.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	ds := make([]*source.Delivery, 0, q.n)
	for range q.n {
		ds = append(ds, q.buf[q.head])
		q.buf[q.head] = nil
		q.head = (q.head + 1) % len(q.buf)
	}
	q.n = 0
	return ds
}

// close lets the workers end once they have taken every queued delivery.
func (q *workQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.searching += q.idle
	q.idle = 0
	q.wake.Broadcast()
	q.mu.Unlock()
}

// work is one worker: it takes deliveries until the queue is closed and empty.
func (q *workQueue) work(handle func(*source.Delivery)) {
	q.mu.Lock()
	searching := true // counted by push
	for {
		if q.n > 0 {
			d := q.buf[q.head]
			q.buf[q.head] = nil
			q.head = (q.head + 1) % len(q.buf)
			q.n--
			if searching {
				q.searching--
				searching = false
			}
			q.wakeIfNoneSearching()
			q.mu.Unlock()
			handle(d)
			q.mu.Lock()
			continue
		}
		if searching {
			q.searching--
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.idle++
		q.wake.Wait()
		searching = true // counted by whoever woke it
	}
}
