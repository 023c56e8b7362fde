// Package timerq runs functions at a time on a clock: settle's in-process delays.
package timerq

import (
	"container/heap"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// Queue runs scheduled functions when they come due on its clock, one at a time in due
// order, on the goroutine that calls Run.
type Queue struct {
	clock   clock.Clock
	mu      sync.Mutex
	items   items
	running int // due functions taken from items and not yet returned
	seq     uint64
	wake    chan struct{}
}

// New returns an empty queue on c.
func New(c clock.Clock) *Queue {
	return &Queue{clock: c, wake: make(chan struct{}, 1)}
}

// Len returns how many functions wait.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Due reports whether a function is due at the clock's now and has not returned yet.
func (q *Queue) Due() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running > 0 || len(q.items) > 0 && !q.items[0].due.After(q.clock.Now())
}

// Schedule runs fn once d has passed on the queue's clock.
func (q *Queue) Schedule(d time.Duration, fn func()) {
	q.mu.Lock()
	q.seq++
	heap.Push(&q.items, &item{due: q.clock.Now().Add(d), seq: q.seq, fn: fn})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run runs due functions until stop is closed, then returns the functions still waiting
// in due order, without running them.
func (q *Queue) Run(stop <-chan struct{}) []func() {
	recheck := 0
	for {
		q.mu.Lock()
		var wait time.Duration = -1
		var due []func()
		now := q.clock.Now()
		for len(q.items) > 0 {
			it := q.items[0]
			if it.due.After(now) {
				wait = it.due.Sub(now)
				break
			}
			heap.Pop(&q.items)
			due = append(due, it.fn)
		}
		q.running = len(due)
		q.mu.Unlock()
		for _, fn := range due {
			fn()
			q.mu.Lock()
			q.running--
			q.mu.Unlock()
		}
		if len(due) > 0 {
			continue
		}
		var timerC <-chan time.Time
		var t clock.Timer
		if wait >= 0 {
			t = q.clock.NewTimer(wait)
			timerC = t.C()
			// A fake clock may have been advanced between reading now and making the
			// timer, leaving it due later than the item: look again before waiting (a
			// few times: the wall clock always moves a little, and that is harmless).
			if q.clock.Now().After(now) && recheck < 3 {
				t.Stop()
				recheck++
				continue
			}
			recheck = 0
		}
		select {
		case <-stop:
			if t != nil {
				t.Stop()
			}
			q.mu.Lock()
			rest := make([]func(), 0, len(q.items))
			for len(q.items) > 0 {
				rest = append(rest, heap.Pop(&q.items).(*item).fn)
			}
			q.mu.Unlock()
			return rest
		case <-q.wake:
		case <-timerC:
		}
		if t != nil {
			t.Stop()
		}
	}
}

type item struct {
	due time.Time
	fn  func()
	seq uint64
}

type items []*item

func (h items) Len() int { return len(h) }
func (h items) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h items) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *items) Push(x any)   { *h = append(*h, x.(*item)) }
func (h *items) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
