package settle

import (
	"context"

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
// its own answer, as it would on the client (see batcher).
type moveBatcher struct {
	consumer string
	group    string
	rdb      redis.Scripter
	stream   string

	batcher[streamMoveReq]
}

// streamMoveReq is one delivery's move.
type streamMoveReq struct {
	dest   string
	maxLen int64
	move   script.Move
}

// move appends values to dest (bounded to about maxLen entries when maxLen > 0) and
// acknowledges entry id of the stream, as script.StreamMove does, in a batch with the
// moves asked for at the same time. It returns the move's own error.
func (b *moveBatcher) move(ctx context.Context, dest string, maxLen int64, id string, values []any) error {
	return b.do(ctx, streamMoveReq{dest: dest, maxLen: maxLen, move: script.Move{ID: id, Values: values}}, maxMoveBatch, b.send)
}

// send runs one round: one script call per destination (retry copies go back to the
// stream, dead letters to the dead-letter stream), and returns every move's error.
func (b *moveBatcher) send(ctx context.Context, reqs []streamMoveReq) []error {
	errs := make([]error, len(reqs))
	done := make([]bool, len(reqs))
	moves := make([]script.Move, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, first := range reqs {
		if done[i] {
			continue
		}
		moves, idx = moves[:0], idx[:0]
		for j := i; j < len(reqs); j++ {
			if !done[j] && reqs[j].dest == first.dest && reqs[j].maxLen == first.maxLen {
				moves = append(moves, reqs[j].move)
				idx = append(idx, j)
				done[j] = true
			}
		}
		for k, err := range script.StreamMoves(ctx, b.rdb, first.dest, b.stream, b.group, b.consumer, first.maxLen, moves) {
			errs[idx[k]] = err
		}
	}
	return errs
}
