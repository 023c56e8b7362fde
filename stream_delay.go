package settle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// A stream mounted with settle.DelayIn(delayed.DurableZset{…}) keeps its RetryAfter
// delays in that sorted set: Park moves the retry copy there and acknowledges the
// original in one script, and every Fetch first sweeps the due members back into the
// stream. This file holds that part of the stream transport.

// parkPoll bounds a read while deliveries of this consumer are in flight: their handlers
// may park a delay shorter than the read's block, which the blocked read could not see.
const parkPoll = 25 * time.Millisecond

// testPoll bounds a read while a delay is pending under a test's fake clock: the test may
// advance the clock at any moment, and the next sweep must see it soon.
const testPoll = 5 * time.Millisecond

// durableZset returns the mount's durable delay set, if it has one.
func (t *streamTransport) durableZset() (delayed.DurableZset, bool) {
	dz, ok := t.env.Policy.Delay.(delayed.DurableZset)
	return dz, ok
}

// scriptNow is the "now" argument of the delay scripts: a test's fake clock, or -1 for
// the Redis server's TIME.
func (t *streamTransport) scriptNow() int64 {
	if t.env.TestClock != nil {
		return t.env.TestClock.Now().UnixMilli()
	}
	return -1
}

// Park implements source.Parker: the retry copy (payload and the given headers) goes
// into the mount's delay set, due once delay has passed on the Redis server's clock, and
// the original entry is acknowledged, in one Lua script.
func (t *streamTransport) Park(ctx context.Context, d *source.Delivery, headers map[string]string, delay time.Duration) error {
	dz, ok := t.durableZset()
	var err error
	if !ok {
		err = fmt.Errorf("stream %q: park of %s: the mount has no durable delay set", t.src.key, d.ID)
	} else {
		payload := d.Payload
		if !d.HasPayload {
			payload = nil
		}
		member := wire.DelayMember(d.ID, payload, headers)
		if _, err = script.Park(ctx, t.src.rdb, dz.Key, t.src.key, t.src.group, d.ID, member, delay, dz.TTL, t.scriptNow()); err != nil {
			err = fmt.Errorf("stream %q: park of %s in %q: %w", t.src.key, d.ID, dz.Key, err)
		}
	}
	t.settledIDs(err, d)
	return err
}

// sweepDelays moves the due members of the mount's delay set into the stream, looping
// while full batches move, and returns how long the next read may block: no longer than
// until the earliest member still waiting comes due.
func (t *streamTransport) sweepDelays(ctx context.Context, wait time.Duration) (time.Duration, error) {
	dz, ok := t.durableZset()
	if !ok {
		return wait, nil
	}
	// Look at the deliveries in flight before sweeping: one that settles between the
	// sweep and this check may have parked a delay the sweep did not see.
	t.mu.Lock()
	inflight := len(t.inflight)
	t.mu.Unlock()
	var res script.SweepResult
	for {
		var err error
		res, err = script.Sweep(ctx, t.src.rdb, dz.Key, t.src.key, t.scriptNow(), script.SweepBatch, wire.FieldPayload)
		if err != nil {
			return wait, fmt.Errorf("stream %q: sweep delays from %q: %w", t.src.key, dz.Key, err)
		}
		if res.Moved < script.SweepBatch {
			break
		}
	}
	return boundedWait(wait, res, t.env.TestClock != nil, inflight > 0), nil
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

// parksDurably reports whether the mount keeps its delays in a durable delay set.
func (t *streamTransport) parksDurably() bool {
	_, ok := t.durableZset()
	return ok
}

// validateDelay refuses a durable delay set the stream cannot use.
func (t *streamTransport) validateDelay(p source.Policy) []error {
	dz, ok := p.Delay.(delayed.DurableZset)
	if !ok || dz.Key == "" {
		return nil // the App refuses an empty Key for every source
	}
	var errs []error
	s := t.src
	if dz.Key == s.key {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the stream's", dz.Key))
	}
	if p.DeadLetter != "" && dz.Key == p.DeadLetter {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the dead-letter stream's", dz.Key))
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		ks := []string{s.key, dz.Key}
		if p.DeadLetter != "" {
			ks = append(ks, p.DeadLetter)
		}
		if err := keys.SameSlot(ks...); err != nil {
			errs = append(errs, fmt.Errorf("on Redis Cluster the stream, its delay set and its dead-letter stream must share a slot (parking and sweeping are one Lua script each): %w", err))
		}
	}
	return errs
}

// delayProblems returns the App's refusals of a mount's delay strategy, for any source.
func delayProblems(m *mount) []error {
	dz, ok := m.cfg.delay.(delayed.DurableZset)
	if !ok {
		return nil
	}
	var errs []error
	if dz.Key == "" {
		errs = append(errs, errors.New("DelayIn(delayed.DurableZset{}): Key is empty; name the sorted set, e.g. \"{orders}:delayed\""))
	}
	if dz.TTL < 0 {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{TTL: %s}): TTL must not be negative (0: the set never expires)", dz.TTL))
	}
	if !m.info.Caps.Parks {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): a %s source cannot keep delays in a sorted set; use delayed.InProcess{}", dz.Key, m.info.Kind))
	}
	return errs
}
