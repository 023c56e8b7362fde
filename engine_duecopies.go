package settle

import (
	"slices"
	"sync"

	"github.com/settlekit/settle/internal/source"
)

// dueCopies writes a mount's in-process delays as they come due, for a transport that
// writes many moves in one call (Info.BatchesMoves): the copies due meanwhile go together, at
// most maxDueBatch per call, on one goroutine at a time that ends once none is left
// (Run waits for it, as for any delayed write). A goroutine and a round trip per copy
// fell behind when thousands came due together: a burst of 50,000 in 1.5 s was written
// up to 0.6 s after due (p99); in batches of 128, 0.4 s; of 512, 0.2 s.
type dueCopies struct {
	app *App
	m   *mount

	mu      sync.Mutex
	queue   []copyReq
	running bool
}

// maxDueBatch bounds the due copies one Moves call carries: more than a
// handler's copies (maxCopyBatch), as a burst of delays comes due all at once, and one
// call's script still holds Redis for only a millisecond or two.
const maxDueBatch = 512

// newDueCopies returns the mount's writer of due copies, or nil when its transport
// writes moves one at a time.
func newDueCopies(m *mount, a *App) *dueCopies {
	if !m.info.BatchesMoves {
		return nil
	}
	return &dueCopies{app: a, m: m}
}

// add queues a due copy (it never blocks: the delay queue's loop calls it).
func (w *dueCopies) add(req copyReq) {
	w.mu.Lock()
	w.queue = append(w.queue, req)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		w.app.delayed.Go(w.write)
	}
}

// write writes and reports the queued copies until none is left.
func (w *dueCopies) write() {
	var moves []source.Move
	for {
		w.mu.Lock()
		n := min(len(w.queue), maxDueBatch)
		if n == 0 {
			w.queue, w.running = nil, false
			w.mu.Unlock()
			return
		}
		reqs := slices.Clone(w.queue[:n])
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		w.mu.Unlock()
		moves = w.app.writeMoves(w.m, reqs, moves)
	}
}
