package inbox

import (
	"reflect"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// testClocks holds, per test clock, the time it showed when the first queue of the
// process ran on it: the instant the clock and the database's clock are taken to
// agree. One entry per test clock the process ever runs a queue on (tests only).
var testClocks sync.Map // clock.Clock -> time.Time

// testOrigin returns the time c showed when the first queue ran on it; a clock that
// cannot be a map key has its origin at now (each queue on it then starts at the
// database's clock).
func testOrigin(c clock.Clock) time.Time {
	now := c.Now()
	if !reflect.TypeOf(c).Comparable() {
		return now
	}
	origin, _ := testClocks.LoadOrStore(c, now)
	return origin.(time.Time)
}

// testSkew is how far a test clock has moved since origin: what a queue's statements
// add to the database's clock, so that Advance(d) brings a row delayed by d due while a
// row inserted at the database's now (by Publish or by the service's own SQL) is due at
// once, whatever time the test clock started at.
func testSkew(c clock.Clock, origin time.Time) time.Duration {
	return max(c.Now().Sub(origin), 0)
}
