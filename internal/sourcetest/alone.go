package sourcetest

import "sync"

// Concurrent counts the handlers of a test running at once, for the tests that check a
// delivery taken over from a dead consumer runs alone. The zero value is ready.
type Concurrent struct {
	mu sync.Mutex
	n  int
}

// Enter counts a handler in and reports whether it is the only one running; leave
// counts it out (defer it).
func (r *Concurrent) Enter() (alone bool, leave func()) {
	r.mu.Lock()
	r.n++
	alone = r.n == 1
	r.mu.Unlock()
	return alone, func() {
		r.mu.Lock()
		r.n--
		r.mu.Unlock()
	}
}
