// Package batch gathers the calls of a batch handler into batches: the calls running
// at once (each a worker with one delivery) join one open batch, and the call that
// opened it runs the whole batch once it is full or its linger has passed, then hands
// each call its own result. It knows nothing of settle's types.
package batch

import (
	"context"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// Gatherer gathers calls into batches of at most Size items. Its zero value is not
// ready: use New.
type Gatherer[T any] struct {
	size   int
	linger time.Duration
	run    func(ctx context.Context, items []T) []error

	mu   sync.Mutex
	open *group[T] // the batch still taking items; nil: none
}

// group is one batch: its items, closed to more at full (or when its opener stops
// waiting), and its results once run.
type group[T any] struct {
	items []T
	full  chan struct{} // closed when items reached the size
	done  chan struct{} // closed when errs is set
	errs  []error
}

// New returns a Gatherer of batches of at most size items whose first item waits at
// most linger for more. run runs one batch and must return one error per item.
func New[T any](size int, linger time.Duration, run func(ctx context.Context, items []T) []error) *Gatherer[T] {
	return &Gatherer[T]{size: max(size, 1), linger: linger, run: run}
}

// Do adds item to the open batch, opening one when none is, and returns item's result
// once the batch ran. The call that opened a batch runs it under its own ctx once the
// batch holds Size items, its linger has passed on clk, or ctx ended, whichever comes
// first; the others wait for it. A batch never holds more than Size items: the item
// that fills it closes it, and the next call opens another.
func (g *Gatherer[T]) Do(ctx context.Context, clk clock.Clock, item T) error {
	g.mu.Lock()
	if b := g.open; b != nil {
		i := len(b.items)
		b.items = append(b.items, item)
		if len(b.items) >= g.size {
			g.open = nil
			close(b.full)
		}
		g.mu.Unlock()
		<-b.done
		return b.errs[i]
	}
	b := &group[T]{items: make([]T, 1, g.size), full: make(chan struct{}), done: make(chan struct{})}
	b.items[0] = item
	if g.size > 1 {
		g.open = b
	}
	g.mu.Unlock()
	if g.size > 1 {
		if g.linger > 0 {
			t := clk.NewTimer(g.linger)
			select {
			case <-b.full:
			case <-t.C():
			case <-ctx.Done():
			}
			t.Stop()
		}
		g.mu.Lock()
		if g.open == b {
			g.open = nil
		}
		g.mu.Unlock()
	}
	// Closed: no call appends to b.items any more.
	b.errs = g.run(ctx, b.items)
	close(b.done)
	return b.errs[0]
}
