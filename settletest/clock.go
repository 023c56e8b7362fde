package settletest

import (
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/settlekit/settle"
)

// Clock is a fake clock for settle.Config.Test.Clock. It stands still until Advance
// moves it; timers made on it fire, in due order, when Advance reaches their time. An
// attached miniredis follows it, so Redis-side time (TIME inside Lua scripts, new stream
// ids, idle times, key TTLs) moves with it. It is safe for concurrent use: Advance may
// be called while timers are being made.
type Clock struct {
	minis  []*miniredis.Miniredis
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

var _ settle.Clock = (*Clock)(nil)

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start}
}

// Advance moves the clock forward by d, firing every timer due by then in due order,
// and moves the attached miniredis servers to the new time.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	target := c.now.Add(d)
	sort.SliceStable(c.timers, func(i, j int) bool {
		if c.timers[i].at.Equal(c.timers[j].at) {
			return c.timers[i].seq < c.timers[j].seq
		}
		return c.timers[i].at.Before(c.timers[j].at)
	})
	n := 0
	for _, t := range c.timers {
		if t.at.After(target) {
			break
		}
		if t.at.After(c.now) {
			c.now = t.at
		}
		t.fire(c.now)
		n++
	}
	c.timers = append(c.timers[:0], c.timers[n:]...)
	if target.After(c.now) {
		c.now = target
	}
	for _, m := range c.minis {
		m.SetTime(c.now)
	}
}

// AttachMiniredis makes m follow the clock: its time is set now and on every Advance,
// and its key TTLs count down with the clock.
func (c *Clock) AttachMiniredis(m *miniredis.Miniredis) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m.SetTime(c.now)
	m.ClockTTL(true)
	c.minis = append(c.minis, m)
}

// NewTimer returns a timer that fires once the clock has been advanced by d; a d of zero
// or less fires at once.
func (c *Clock) NewTimer(d time.Duration) settle.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{at: c.now.Add(d), c: c, ch: make(chan time.Time, 1), seq: c.seq}
	if d <= 0 {
		t.fire(c.now)
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Timers returns how many timers wait on the clock.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	at    time.Time
	c     *Clock
	ch    chan time.Time
	fired bool
	seq   uint64
}

// fire sends now on the timer's channel; called with the clock's lock held.
func (t *fakeTimer) fire(now time.Time) {
	t.fired = true
	t.ch <- now // buffered, sent once
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.fired {
		return false
	}
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			t.fired = true // never fires now
			return true
		}
	}
	return false
}
