package inbox

import (
	"fmt"
	"sync"
	"time"
)

// A worker that crashes leaves every row it held leased until the lease passes, and the
// claim that takes such a row over adds the attempt the crash spent (see claimCount).
// With read-ahead a worker holds many rows; had the next worker taken them all over at
// once, a row that kills its process would kill that worker too while it held all of
// them, and every row would be charged again, crash after crash, until the cap
// dead-lettered them all. So a plain queue's claim takes only rows whose lease is NULL
// (new, put back, released, parked and due: every settlement clears the lease), and a
// separate takeover claim takes the rows whose lease passed, in lots of one, the next
// only once the last has left the worker (settled, handed back at a stop, or its lease
// lost); the engine runs each alone (see source.Delivery.TakenOver). A row that kills
// its process then kills the next worker holding it alone, and no other row is charged
// that crash. A FIFO queue has one row of its group in flight at a time, a
// lot of one: its one claim takes the group's head row whether its lease is NULL or
// passed, in order (claimLease).

// takeover is a plain queue's takeover of the rows whose lease passed: the lot of rows
// it took over last and still holds, and when to look again. Its methods are safe for
// concurrent use; a nil *takeover (a FIFO queue's) never takes over.
type takeover struct {
	// always: look at every claim the lot leaves room for (under a test clock, whose
	// Advance may pass any lease).
	always bool
	// poll is how long after a takeover that found fewer rows than it asked for the next
	// one comes (see takeoverPoll).
	poll time.Duration
	// size is the most rows one lot takes over (the transport's: one).
	size int
	// wake is called when the last row of a lot that filled its room leaves: more rows
	// may wait, and an idle Fetch should claim again.
	wake func()

	mu   sync.Mutex
	full bool               // the last takeover found all the rows it asked for
	lot  map[*held]struct{} // the rows of the last lot still held here
	next time.Time          // no takeover before this, on the wall clock (zero: at the next claim)
}

// takeoverPoll is how long after a takeover that found fewer rows than it asked for the
// next one comes, for a queue that polls every poll and leases for lease: a tenth of the
// lease, or the poll if longer. A takeover that finds nothing reads every leased row of
// the group (all of them without an index led by (group, locked_until)), so it runs far
// less often than a claim; a dead worker's row then waits at most a tenth of its lease
// more than the lease itself.
func takeoverPoll(poll, lease time.Duration) time.Duration { return max(poll, lease/10) }

// newTakeover returns the takeover of a queue whose mount runs concurrency handlers,
// looking again poll after a takeover that found fewer rows than it asked for; always (a
// test clock) looks at every claim the lot leaves room for.
func newTakeover(concurrency int, poll time.Duration, always bool, wake func()) *takeover {
	return &takeover{always: always, poll: poll, size: max(concurrency, 1), wake: wake, lot: map[*held]struct{}{}}
}

// want returns how many rows the claim now should take over, at most max: none while a
// row of the last lot is held, none before next unless always, else the lot's size. It
// costs no statement: the hot path runs the takeover claim only when want says so.
func (o *takeover) want(now time.Time, max int) int {
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.lot) > 0 || (!o.always && now.Before(o.next)) {
		return 0
	}
	return min(o.size, max)
}

// took records a takeover claim that asked for asked rows and leased hs: hs are the new
// lot (each row's lot set before the row is handed out, so its leaving finds it). A claim
// that found fewer rows than it asked for has seen every lease that passed: the next
// looks a poll later; one that filled its room looks again once this lot has left.
func (o *takeover) took(hs []*held, asked int, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.full = len(hs) == asked
	if o.full {
		o.next = time.Time{}
	} else {
		o.next = now.Add(o.poll)
	}
	for _, h := range hs {
		h.lot = o
		o.lot[h] = struct{}{}
	}
}

// leave drops h from the lot (h left the worker: settled, its lease lost, or handed
// back); leaving twice, or a row of no lot, changes nothing. When the lot empties after
// a takeover that filled its room, it wakes the queue to take the next lot.
func (o *takeover) leave(h *held) {
	if o == nil {
		return
	}
	o.mu.Lock()
	_, in := o.lot[h]
	delete(o.lot, h)
	wake := in && len(o.lot) == 0 && o.full
	o.mu.Unlock()
	if wake && o.wake != nil {
		o.wake()
	}
}

// reset forgets the lot (the transport closed: what it held is no longer its own).
func (o *takeover) reset() {
	if o == nil {
		return
	}
	o.mu.Lock()
	clear(o.lot)
	o.mu.Unlock()
}

// claimLease is the lease condition of a queue's main claim, now being the dialect's
// "now": a plain queue takes the rows whose lease is NULL (the takeover claim takes
// those whose lease passed); a FIFO queue takes its group's head row in order, whether
// its lease is NULL or passed (see the comment atop this file).
func (c quotedTable) claimLease(now string, fifo bool) string {
	if fifo {
		return fmt.Sprintf("(%s IS NULL OR %s <= %s)", c.lease, c.lease, now)
	}
	return c.lease + " IS NULL"
}

// takeoverLease is the lease condition of a takeover claim: a lease set and passed (a
// NULL lease compares to nothing).
func (c quotedTable) takeoverLease(now string) string {
	return fmt.Sprintf("%s <= %s", c.lease, now)
}
