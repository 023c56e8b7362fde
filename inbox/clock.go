package inbox

import (
	"context"
	"database/sql"
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

// A test clock's Advance(d) moves every queue's "now" on it by d at once, while the
// heartbeat that extends a running row's lease (a timer on the same clock) runs only
// afterwards, on its own goroutine: a claim in between would see the lease passed and
// run the row's handler a second time. So under a test clock, before each claim, the
// claiming queue brings the leases of every live worker on the clock, reading the same
// table, up to the "now" the claim will use (catchUp): advancing the clock passes the
// time for the live workers' heartbeats too. A live worker is a transport whose
// heartbeat runs on that very clock (an App's mount on it); a worker that crashed (its
// App stopped, or a test's transport whose heartbeat runs on a clock that never moves)
// is not one, so its rows still come back once Advance passes their leases.

// liveKey names the live workers that one claim brings up to date.
type liveKey struct {
	clock clock.Clock
	db    *sql.DB
	table string
}

// live holds the transports open on each liveKey (tests only).
var live sync.Map // liveKey -> *liveSet

type liveSet struct {
	mu sync.Mutex
	ts map[*transport]struct{}
}

// liveKeyOf returns the key t's claims bring up to date and whether t is itself a live
// worker on it; ok is false when t runs on no test clock, or one that cannot be a map
// key (t then keeps only its own rows' leases up to date).
func liveKeyOf(t *transport) (key liveKey, self, ok bool) {
	c := t.env.TestClock
	if c == nil || !reflect.TypeOf(c).Comparable() {
		return liveKey{}, false, false
	}
	self = t.env.Clock != nil && reflect.TypeOf(t.env.Clock).Comparable() && t.env.Clock == c
	return liveKey{clock: c, db: t.q.ib.db, table: t.q.ib.table.Name}, self, true
}

// joinLive records t as a live worker, until leaveLive.
func joinLive(t *transport) {
	key, self, ok := liveKeyOf(t)
	if !ok || !self {
		return
	}
	v, _ := live.LoadOrStore(key, &liveSet{ts: map[*transport]struct{}{}})
	set := v.(*liveSet)
	set.mu.Lock()
	set.ts[t] = struct{}{}
	set.mu.Unlock()
}

// leaveLive forgets t as a live worker.
func leaveLive(t *transport) {
	key, _, ok := liveKeyOf(t)
	if !ok {
		return
	}
	if v, found := live.Load(key); found {
		set := v.(*liveSet)
		set.mu.Lock()
		delete(set.ts, t)
		set.mu.Unlock()
	}
}

// catchUp, before a claim by t at skew, extends every lease of the live workers on t's
// test clock and table that was written at an earlier skew, or longer ago (on the wall
// clock) than a third of the lease: what their heartbeats would have done had the time
// Advance passed really passed (and what the wall-clock time the database's clock moves
// under a paused test clock calls for).
func catchUp(ctx context.Context, t *transport, skew time.Duration) {
	key, self, ok := liveKeyOf(t)
	if !ok {
		return
	}
	var peers []*transport
	if v, found := live.Load(key); found {
		set := v.(*liveSet)
		set.mu.Lock()
		for p := range set.ts {
			peers = append(peers, p)
		}
		set.mu.Unlock()
	}
	if !self {
		peers = append(peers, t) // not a live worker: its own rows are still its own
	}
	for _, p := range peers {
		p.leases.extendStale(ctx, skew)
	}
}
