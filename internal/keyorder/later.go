package keyorder

import (
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// Later holds deliveries that run again in place once their delay has passed on a
// clock (a retry of a key's head: its entry stays pending meanwhile). Stop cancels
// those still waiting. It is safe for concurrent use.
type Later[T comparable] struct {
	clock clock.Clock

	mu      sync.Mutex
	held    map[T]chan struct{} // closed to cancel
	stopped bool
}

// NewLater returns a Later that times delays on c.
func NewLater[T comparable](c clock.Clock) *Later[T] {
	return &Later[T]{clock: c, held: map[T]chan struct{}{}}
}

// After calls run(v) once d has passed, from a goroutine of its own, unless Stop comes
// first; false when the Later is stopped already (run is never called).
func (l *Later[T]) After(d time.Duration, v T, run func(T)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	cancel := make(chan struct{})
	l.held[v] = cancel
	t := l.clock.NewTimer(d) // made here, so that a fake clock advanced after After returns fires it
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
		case <-cancel:
			return
		}
		l.mu.Lock()
		_, mine := l.held[v]
		delete(l.held, v)
		l.mu.Unlock()
		if mine {
			run(v)
		}
	}()
	return true
}

// Stop cancels every delivery still waiting and returns them; After refuses any more.
func (l *Later[T]) Stop() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	out := make([]T, 0, len(l.held))
	for v, cancel := range l.held {
		close(cancel)
		out = append(out, v)
		delete(l.held, v)
	}
	return out
}
