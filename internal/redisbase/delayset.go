package redisbase

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// A mount with settle.DelayIn(delayed.DurableZset{…}) keeps its RetryAfter delays in
// that sorted set, whatever it reads: a stream, a list or a channel. Each transport
// parks its own way (the stream acknowledges its entry, the reliable list takes the
// item out of its processing list) and sweeps its own way (XADD, RPUSH, PUBLISH); what
// they share is here: the checks at startup, the "now" of the scripts, the sweep loop
// before each read and the bound it puts on that read's wait.

// parkPoll bounds a read while deliveries of this consumer are in flight: their handlers
// may park a delay shorter than the read's block, which the blocked read could not see.
const parkPoll = 25 * time.Millisecond

// testPoll bounds a read while a delay is pending under a test's fake clock: the test may
// advance the clock at any moment, and the next sweep must see it soon.
const testPoll = 5 * time.Millisecond

// DelaySet is a mount's durable delay set as its transport uses it.
type DelaySet struct {
	delayed.DurableZset
	env       source.Env   // for its sweep events and log lines
	failing   *atomic.Bool // the last sweep failed (shared by the copies of one mount's set)
	testClock clock.Clock  // a test's fake clock, nil in production
}

// DelaySetOf returns the mount's durable delay set, if it has one.
func DelaySetOf(env source.Env) (DelaySet, bool) {
	dz, ok := env.Policy.Delay.(delayed.DurableZset)
	return DelaySet{DurableZset: dz, env: env, failing: new(atomic.Bool), testClock: env.TestClock}, ok
}

// DelaySetProblems refuses a durable delay set a Redis source cannot use: one whose key
// is the source's (kind names it: "stream", "list", "reliable list") or its dead
// letter's, or, on Redis Cluster, one outside the slot of key (the keys its park and
// sweep scripts touch besides the set share key's slot, or are refused by the transport).
func DelaySetProblems(p source.Policy, rdb redis.UniversalClient, kind, key string) []error {
	dz, ok := p.Delay.(delayed.DurableZset)
	if !ok || dz.Key == "" {
		return nil // delayProblems refuses an empty Key for every source
	}
	var errs []error
	if dz.Key == key {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the %s's", dz.Key, kind))
	}
	if p.DeadLetter != "" && dz.Key == p.DeadLetter {
		noun := kind[strings.LastIndex(kind, " ")+1:] // a reliable list's dead letter is a list
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the dead-letter %s's", dz.Key, noun))
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		// Against the source's key only: its other keys (a dead-letter key) are the
		// transport's to check against it, once.
		if err := keys.SameSlot(key, dz.Key); err != nil {
			errs = append(errs, fmt.Errorf("on Redis Cluster the %s and its delay set must share a slot (parking and sweeping are one Lua script each): %w", kind, err))
		}
	}
	return errs
}

// Now is the "now" argument of the delay scripts: the test's fake clock, or -1 for the
// Redis server's TIME.
func (s DelaySet) Now() int64 {
	if s.testClock != nil {
		return s.testClock.Now().UnixMilli()
	}
	return -1
}

// ParkValue parks the retry copy of a list item or channel message m (its envelope) in
// the set, due once m.Delay has passed on the Redis server's clock. The pop or the
// receive already took the original: there is nothing to complete.
func (s DelaySet) ParkValue(ctx context.Context, rdb redis.Scripter, m source.Move) error {
	member := ValueMember(wire.Envelope(m.Delivery.Payload, m.Headers))
	_, _, err := script.ParkValue(ctx, rdb, s.Key, "", "", member, m.Delay, s.TTL, s.Now())
	return err
}

// Sweep calls move (one sweep script: at most script.SweepBatch members) while full
// batches move, and returns how long the next read may block: wait, bounded by the
// time until the earliest member still waiting comes due (see boundedWait). inflight
// says whether deliveries that may park were in flight before the sweep began (look
// before sweeping: a delivery that settles between the sweep and the look may have
// parked a delay the sweep did not see). The last call's result is returned too. A
// failed call does not fail the read that follows: see sweepFailed.
func (s DelaySet) Sweep(ctx context.Context, wait time.Duration, inflight bool, move func(ctx context.Context, now int64) (script.SweepResult, error)) (time.Duration, script.SweepResult) {
	var res script.SweepResult
	for {
		var err error
		if res, err = move(ctx, s.Now()); err != nil {
			return s.sweepFailed(ctx, wait, err), res
		}
		if s.failing != nil && s.failing.Swap(false) && s.env.Logger != nil {
			s.env.Logger.InfoContext(ctx, "settle: delay set sweep succeeds again", slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.Key))
		}
		if res.Moved > 0 {
			s.env.Emit(ctx, source.Event{Kind: source.EventSweep, Count: res.Moved})
			if s.env.Logger != nil && s.env.Logger.Enabled(ctx, slog.LevelDebug) {
				s.env.Logger.DebugContext(ctx, "settle: delayed copies came due and were moved back", slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.Key), slog.Int("count", res.Moved))
			}
		}
		if res.Moved < script.SweepBatch {
			break
		}
	}
	return boundedWait(wait, res, s.testClock != nil, inflight), res
}

// sweepFailed logs a failed sweep (once until one succeeds) and returns the next read's
// wait, at most a second so that the sweep is tried again soon. The read goes on: a
// delay set that cannot be swept (a key that took another type, a refused write) must
// not stop the mount's other messages; its members wait until it can be swept again.
func (s DelaySet) sweepFailed(ctx context.Context, wait time.Duration, err error) time.Duration {
	if (s.failing == nil || !s.failing.Swap(true)) && s.env.Logger != nil {
		s.env.Logger.ErrorContext(ctx, "settle: delay set sweep failed: its due members wait, the mount reads on, and the sweep is tried again before each read (logged once until it succeeds)",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.Key), slog.Any(source.AttrError, err))
	}
	if wait < 0 {
		return wait
	}
	return min(wait, time.Second)
}

// ValueMember is the delay set member holding the retry copy value of a list item or
// channel message, under a random token so that equal copies stay distinct members.
func ValueMember(value []byte) string {
	return wire.ValueDelayMember(rand.Text(), value)
}

// boundedWait bounds a read's block by the next due delay (and, under a fake clock or
// while handlers that may park are running, by a short poll). A negative wait (no
// blocking) stays as it is; a bounded wait is never below a millisecond, since a block
// of 0 would wait forever.
func boundedWait(wait time.Duration, res script.SweepResult, fakeClock, inflight bool) time.Duration {
	if wait < 0 {
		return wait
	}
	if res.Next >= 0 {
		wait = min(wait, max(time.Duration(res.Next-res.Now)*time.Millisecond, time.Millisecond))
		if fakeClock {
			wait = min(wait, testPoll)
		}
	}
	if inflight {
		wait = min(wait, parkPoll)
	}
	return wait
}
