package settle

import (
	"context"
	"sync"
)

// batcher gathers the requests that concurrent callers make at the same time and sends
// them together: the first call to find it idle starts a goroutine that sends what is
// queued, at most max per round, round after round, and returns once the queue is
// empty, so no goroutine outlives the calls. Each call waits for its own answer, as it
// would on the client; a round runs under its first call's context (every caller
// passes a settlement context of the same bound).
type batcher[T any] struct {
	mu      sync.Mutex
	queue   []*batchCall[T]
	running bool
}

type batchCall[T any] struct {
	ctx  context.Context
	done sync.WaitGroup // done once err is set
	err  error
	req  T
}

// do queues req, to be sent with the requests queued meanwhile by send (which returns
// one error per request, in order, and is the same function on every call of one
// batcher), and returns req's own error.
func (b *batcher[T]) do(ctx context.Context, req T, max int, send func(context.Context, []T) []error) error {
	c := &batchCall[T]{ctx: ctx, req: req}
	c.done.Add(1)
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if !b.running {
		b.running = true
		go b.flush(max, send)
	}
	b.mu.Unlock()
	c.done.Wait()
	return c.err
}

// flush sends the queued requests, at most max per round, until none is left.
func (b *batcher[T]) flush(max int, send func(context.Context, []T) []error) {
	var calls []*batchCall[T]
	var reqs []T
	for {
		b.mu.Lock()
		n := min(len(b.queue), max)
		if n == 0 {
			b.queue = nil
			b.running = false
			b.mu.Unlock()
			return
		}
		calls = append(calls[:0], b.queue[:n]...)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		reqs = reqs[:0]
		for _, c := range calls {
			reqs = append(reqs, c.req)
		}
		errs := send(calls[0].ctx, reqs)
		for i, c := range calls {
			c.err = answer(errs, i)
			c.done.Done()
		}
	}
}
