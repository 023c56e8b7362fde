package examplerun

import (
	"fmt"
	"sync"

	"github.com/settlekit/settle"
)

// Counts are a run's final settlements by kind.
type Counts struct {
	Acked, Dropped, Dead int
	// Delayed counts the RetryAfter delays parked (not final).
	Delayed int
	// Reviewed counts the final settlements of the review mount.
	Reviewed int
}

// Settled is how many messages reached a final state: acked, dropped or dead-lettered.
func (c Counts) Settled() int { return c.Acked + c.Dropped + c.Dead }

// Tally counts the settlements of the deliveries one run claimed (a table or list may
// hold other runs' messages too) and says when all n messages reached a final state.
//
// A delivery is named by mount, id and attempt: a retry's event comes after the retry is
// written, and by then the message's next delivery may have begun (keyed by mount and id
// alone, that late event erased the next delivery's claim, whose final event then went
// uncounted and the run never ended).
type Tally struct {
	n      int
	review string
	done   chan struct{}

	mu   sync.Mutex
	ours map[string]bool // "mount/id/attempt" of this run's deliveries
	c    Counts
}

// NewTally returns a tally of n messages. With review set, the final settlements of that
// mount count as reviewed, and the run is done only once every dead letter is reviewed.
func NewTally(n int, review string) *Tally {
	return &Tally{n: n, review: review, done: make(chan struct{}), ours: map[string]bool{}}
}

func deliveryKey(mount, id string, attempt int) string {
	return fmt.Sprintf("%s/%s/%d", mount, id, attempt)
}

// Claim records that this run is handling m on mount.
func (t *Tally) Claim(mount string, m *settle.Message) {
	t.mu.Lock()
	t.ours[deliveryKey(mount, m.ID, m.Attempt)] = true
	t.mu.Unlock()
}

// Settled counts s, if it settled a delivery this run claimed and was applied (a failed
// settlement leaves the message to come back).
func (t *Tally) Settled(s settle.Settled) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := deliveryKey(s.Mount, s.ID, s.Attempt)
	if !t.ours[key] || s.Err != nil {
		return
	}
	delete(t.ours, key)
	switch {
	case t.review != "" && s.Mount == t.review && s.Final():
		t.c.Reviewed++
	case s.Action == settle.ActionAck:
		t.c.Acked++
	case s.Action == settle.ActionDrop:
		t.c.Dropped++
	case s.Action == settle.ActionDeadLetter:
		t.c.Dead++
	case s.Action == settle.ActionPark:
		t.c.Delayed++
	}
	if t.c.Settled() == t.n && (t.review == "" || t.c.Reviewed == t.c.Dead) {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

// Done is closed once every message reached a final state (and, with review, every
// dead letter was reviewed).
func (t *Tally) Done() <-chan struct{} { return t.done }

// Counts returns the counts so far.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.c
}
