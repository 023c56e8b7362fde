package settle

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
)

// maxMoveBatch bounds how many moves one script call carries.
const maxMoveBatch = 128

// moveBatcher sends the retry copies and dead letters that concurrent handlers of one
// stream consumer ask for at the same time in one stream_move script call per
// destination: N copies cost one EVALSHA instead of N. Each move is still all or nothing
// on its own, fenced on its own (its entry must still be pending to the consumer) and
// answered on its own: a move that fails fails for its delivery only. A call waits for
// its own answer, as it would on the client.
//
// No goroutine outlives the calls: the first call to find the batcher idle starts one
// that sends what is queued, batch after batch, and returns once the queue is empty.
type moveBatcher struct {
	consumer string
	group    string
	rdb      redis.Scripter
	stream   string

	mu      sync.Mutex
	queue   []*moveCall
	running bool
}

// moveCall is one delivery's move, waiting for its answer.
type moveCall struct {
	ctx    context.Context
	dest   string
	done   sync.WaitGroup // done once err is set
	err    error
	maxLen int64
	move   script.Move
}

// move appends values to dest (bounded to about maxLen entries when maxLen > 0) and
// acknowledges entry id of the stream, as script.StreamMove does, in a batch with the
// moves asked for at the same time. It returns the move's own error.
func (b *moveBatcher) move(ctx context.Context, dest string, maxLen int64, id string, values []any) error {
	c := &moveCall{ctx: ctx, dest: dest, maxLen: maxLen, move: script.Move{ID: id, Values: values}}
	c.done.Add(1)
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if !b.running {
		b.running = true
		go b.flush()
	}
	b.mu.Unlock()
	c.done.Wait()
	return c.err
}

// flush sends the queued moves, at most maxMoveBatch per round, until none is left.
func (b *moveBatcher) flush() {
	var batch []*moveCall
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxMoveBatch)
		if n == 0 {
			b.queue = nil
			b.running = false
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.send(batch)
	}
}

// send runs one round: one script call per destination (retry copies go back to the
// stream, dead letters to the dead-letter stream), under the context of the round's
// first move to that destination (every caller passes a settlement context of the same
// bound), then answers every move.
func (b *moveBatcher) send(batch []*moveCall) {
	moves := make([]script.Move, 0, len(batch))
	calls := make([]*moveCall, 0, len(batch))
	for i, first := range batch {
		if first == nil {
			continue
		}
		moves, calls = moves[:0], calls[:0]
		for j, c := range batch[i:] {
			if c != nil && c.dest == first.dest && c.maxLen == first.maxLen {
				moves = append(moves, c.move)
				calls = append(calls, c)
				batch[i+j] = nil
			}
		}
		errs := script.StreamMoves(first.ctx, b.rdb, first.dest, b.stream, b.group, b.consumer, first.maxLen, moves)
		for k, c := range calls {
			c.err = errs[k]
			c.done.Done()
		}
	}
}
