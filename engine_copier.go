package settle

import (
	"errors"

	"github.com/settlekit/settle/internal/source"
)

// errShortMoves is the error of a move a transport gave no answer for.
var errShortMoves = errors.New("settle: the transport answered fewer moves than it was given")

// answer returns the error of the i-th request of a batch call that returned errs
// (errShortMoves when it answered fewer).
func answer(errs []error, i int) error {
	if i < len(errs) {
		return errs[i]
	}
	return errShortMoves
}

// maxCopyBatch bounds the moves one Moves call of the copier carries.
const maxCopyBatch = 128

// copier batches a mount's moves (copies, put-backs, a claiming stream's left-pending
// retries, parks, dead letters), as the acker batches its acks, for a transport that
// writes many in one call (Info.BatchesMoves): a handler's
// worker queues the move and goes on to its next delivery instead of waiting for the
// write's round trip (parked on it, each woken on its own: a tenth of the client CPU of
// a retry). Each move is reported (OnSettled, the failed-settlement backoff) once the
// transport has answered for it, and close waits for every queued move.
//
// The delivery's slot stays taken until then, and the copier frees it: the read loop
// reads no more than before while moves are being written, and learns of a failed one
// (settleFailed, the transport's re-read) before it reads again, as when the handler
// waited.
type copier struct {
	app   *App
	ch    chan copyReq
	done  chan struct{}
	m     *mount
	slots chan struct{} // the mount's; each queued move holds one
}

type copyReq struct {
	move source.Move
	ev   Settled
}

// newCopier starts the mount's copier, or returns nil when its transport writes moves
// one at a time.
func newCopier(m *mount, a *App, slots chan struct{}) *copier {
	if !m.info.BatchesMoves {
		return nil
	}
	c := &copier{app: a, ch: make(chan copyReq, 2*m.cfg.concurrency), done: make(chan struct{}), m: m, slots: slots}
	go c.run()
	return c
}

func (c *copier) add(mv source.Move, ev Settled) { c.ch <- copyReq{move: mv, ev: ev} }

// close writes and reports the queued moves and stops the copier (nil: nothing to do).
func (c *copier) close() {
	if c == nil {
		return
	}
	close(c.ch)
	<-c.done
}

func (c *copier) run() {
	defer close(c.done)
	reqs := make([]copyReq, 0, 64)
	var moves []source.Move
	for req := range c.ch {
		reqs = gather(c.ch, append(reqs[:0], req), maxCopyBatch)
		moves = c.app.writeMoves(c.m, reqs, moves)
		for range reqs {
			<-c.slots
		}
		clear(reqs)
	}
}

// writeMoves writes reqs' moves in one Moves call and reports each settlement with its
// own error. moves is scratch space, returned for the next call.
func (a *App) writeMoves(m *mount, reqs []copyReq, moves []source.Move) []source.Move {
	moves = moves[:0]
	for _, r := range reqs {
		moves = append(moves, r.move)
	}
	ctx := m.writes.get()
	errs := m.transport.Moves(ctx, moves)
	for i, r := range reqs {
		r.ev.Err = answer(errs, i)
		a.settled(ctx, m, r.move.Delivery, r.ev)
	}
	clear(moves)
	return moves
}
