// Package keyorder keeps one consumer's deliveries of a key one at a time, in the order
// they were read (settle.Ordered): a key's first delivery runs, the later ones wait
// behind it in memory until it has settled, and deliveries of other keys run beside
// it. It is the engine's and not for users.
package keyorder

import "sync"

// Queue holds, per key, the deliveries read behind the one that runs (the key's head).
// Its zero value is not usable: make one with New. It is safe for concurrent use.
type Queue[T comparable] struct {
	mu       sync.Mutex
	keys     map[string]*line[T]
	awaiting int // lines whose head awaits its id
	stopped  bool
	// Short receives (without blocking) each time a head's settlement fails: a reader
	// waiting for room to read may read what fits now (see Awaiting).
	Short chan struct{}
}

// line is one key's deliveries: head runs (or waits to be read again after a failed
// settlement, awaiting its id); waiting follow it in read order.
type line[T comparable] struct {
	head     T
	awaiting string // the head's settlement failed: the id it comes back under
	waiting  []T
}

// New returns an empty Queue.
func New[T comparable]() *Queue[T] {
	return &Queue[T]{keys: map[string]*line[T]{}, Short: make(chan struct{}, 1)}
}

// Admit takes one read's deliveries in read order and returns those that run now: each
// whose key has no delivery running (it becomes the key's head), or that is the head
// coming back after a failed settlement (same id). The others wait behind their key's
// head. An empty key orders nothing: its delivery runs at once.
func (q *Queue[T]) Admit(ds []T, keyOf func(T) (key, id string)) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	run := ds[:0:0]
	for _, d := range ds {
		k, id := keyOf(d)
		if k == "" || q.stopped {
			run = append(run, d)
			continue
		}
		l := q.keys[k]
		switch {
		case l == nil:
			q.keys[k] = &line[T]{head: d}
			run = append(run, d)
		case l.awaiting != "" && l.awaiting == id:
			l.head, l.awaiting = d, ""
			q.awaiting--
			run = append(run, d)
		default:
			l.waiting = append(l.waiting, d)
		}
	}
	return run
}

// Settled reports that key's head settled and returns the key's next delivery, which
// becomes its head and runs now; the zero T when none waits (the key is free).
func (q *Queue[T]) Settled(key string) (next T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.keys[key]
	if key == "" || l == nil || q.stopped {
		return next, false
	}
	if len(l.waiting) == 0 {
		q.forget(key, l)
		return next, false
	}
	next = l.waiting[0]
	var zero T
	l.waiting[0] = zero
	l.waiting = l.waiting[1:]
	if l.awaiting != "" {
		q.awaiting--
	}
	l.head, l.awaiting = next, ""
	return next, true
}

// Failed reports that key's head failed to settle and stays where its transport keeps
// it, to be read again under id: the key's later deliveries keep waiting until that
// delivery has come back (Admit) and settled.
func (q *Queue[T]) Failed(key, id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.keys[key]; l != nil && key != "" {
		if l.awaiting == "" {
			q.awaiting++
		}
		l.awaiting = id
	}
	select {
	case q.Short <- struct{}{}:
	default:
	}
}

// Awaiting reports whether some key's head waits to be read again after its
// settlement failed. Its key's later deliveries hold their room meanwhile, so a reader
// that waits for a full read's room must read what fits instead: the head's own room,
// freed by its failed settlement, is enough.
func (q *Queue[T]) Awaiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.awaiting > 0
}

// forget removes key's line. q.mu is held.
func (q *Queue[T]) forget(key string, l *line[T]) {
	if l.awaiting != "" {
		q.awaiting--
	}
	delete(q.keys, key)
}

// Drop frees key and returns the deliveries that waited behind its head, in read
// order: its head will not come back here (another consumer took it over).
func (q *Queue[T]) Drop(key string) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.keys[key]
	if l == nil {
		return nil
	}
	q.forget(key, l)
	return l.waiting
}

// Stop returns every delivery waiting behind a head, in read order per key, and lets
// the Queue hold nothing more: Settled then returns none, Admit runs everything.
func (q *Queue[T]) Stop() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	var out []T
	for k, l := range q.keys {
		out = append(out, l.waiting...)
		q.forget(k, l)
	}
	return out
}
