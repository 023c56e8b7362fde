// Package clock is the one source of Go-side time in settle: timers for in-process
// delays and read bounds. Production uses the wall clock; the test kit injects a fake
// one whose Advance also moves miniredis's clock.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock: C delivers the time once it fires; Stop
// prevents that and reports whether it did. An interface literal, as settle.Timer is,
// so that a settle.Clock is a Clock.
type Timer = interface {
	C() <-chan time.Time
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
