package inbox

import (
	"context"
	"database/sql"
	"reflect"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
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
// table, up to the "now" the claim will use (liveWorker.catchUp): advancing the clock
// passes the time for the live workers' heartbeats too. A live worker is a transport
// whose heartbeat runs on that very clock (an App's mount on it); a worker that crashed
// (its App stopped, or a test's transport whose heartbeat runs on a clock that never
// moves) is not one, so its rows still come back once Advance passes their leases.

// liveKey names the live workers that one claim brings up to date.
type liveKey struct {
	clock clock.Clock
	db    *sql.DB
	table string
}

// live holds the lease keepers of the live workers on each liveKey (tests only).
var live sync.Map // liveKey -> *liveSet

type liveSet struct {
	mu sync.Mutex
	ks map[*leaseKeeper]struct{}
}

// liveWorker is a transport's place among the live workers of its test clock: the
// zero liveWorker, of a transport on no test clock (or one that cannot be a map key),
// keeps only its own rows' leases up to date.
type liveWorker struct {
	key    liveKey
	leases *leaseKeeper // the transport's
	ok     bool         // the transport runs on a test clock that names key
	self   bool         // the transport is a live worker on key: its heartbeat runs on that clock
}

// newLiveWorker returns the place of the transport of env reading table in db, whose
// leases are kept by leases.
func newLiveWorker(env source.Env, db *sql.DB, table string, leases *leaseKeeper) liveWorker {
	c := env.TestClock
	if c == nil || !reflect.TypeOf(c).Comparable() {
		return liveWorker{leases: leases}
	}
	self := env.Clock != nil && reflect.TypeOf(env.Clock).Comparable() && env.Clock == c
	return liveWorker{key: liveKey{clock: c, db: db, table: table}, leases: leases, ok: true, self: self}
}

// catchUp, before a claim at skew, extends every lease of the live workers on the
// worker's test clock and table that was written at an earlier skew, or longer ago (on
// the wall clock) than a third of the lease: what their heartbeats would have done had
// the time Advance passed really passed (and what the wall-clock time the database's
// clock moves under a paused test clock calls for).
func (w liveWorker) catchUp(ctx context.Context, skew time.Duration) {
	if !w.ok {
		return
	}
	var peers []*leaseKeeper
	if v, found := live.Load(w.key); found {
		set := v.(*liveSet)
		set.mu.Lock()
		for k := range set.ks {
			peers = append(peers, k)
		}
		set.mu.Unlock()
	}
	if !w.self {
		peers = append(peers, w.leases) // not a live worker: its own rows are still its own
	}
	for _, k := range peers {
		k.extendStale(ctx, skew)
	}
}

// join records the worker as a live one, until leave, when it is one.
func (w liveWorker) join() {
	if !w.ok || !w.self {
		return
	}
	v, _ := live.LoadOrStore(w.key, &liveSet{ks: map[*leaseKeeper]struct{}{}})
	set := v.(*liveSet)
	set.mu.Lock()
	set.ks[w.leases] = struct{}{}
	set.mu.Unlock()
}

// leave forgets the worker as a live one.
func (w liveWorker) leave() {
	if !w.ok {
		return
	}
	if v, found := live.Load(w.key); found {
		set := v.(*liveSet)
		set.mu.Lock()
		delete(set.ks, w.leases)
		set.mu.Unlock()
	}
}
