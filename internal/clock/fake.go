package clock

import (
	"sync"
	"time"
)

// Fake is the tests' one fake clock: it moves only by Advance, and fires the timers that
// came due as it moves (a timer of a non-positive duration fires at once). Made, when
// set, receives a value each time a timer is made, so that a test can advance only once
// the code under test waits on its timer; AfterAdvance, when set, is called with the new
// time after each Advance (to move a miniredis clock with it).
type Fake struct {
	AfterAdvance func(now time.Time)
	Made         chan struct{}

	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock has been advanced by d.
func (c *Fake) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), due: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
	} else {
		c.timers = append(c.timers, t)
	}
	c.mu.Unlock()
	if c.Made != nil {
		c.Made <- struct{}{}
	}
	return t
}

// Advance moves the clock by d and fires the timers that came due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if c.AfterAdvance != nil {
		c.AfterAdvance(c.now)
	}
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.due.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Pending returns how many timers have neither fired nor been stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	c   *Fake
	ch  chan time.Time
	due time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
