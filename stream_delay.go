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

// sweepDelays moves the due members of the mount's delay set into the stream, looping
// while full batches move, and returns how long the next read may block: no longer than
// until the earliest member still waiting comes due.
func (t *streamTransport) sweepDelays(ctx context.Context, wait time.Duration) (time.Duration, error) {
	dz, ok := delaySetOf(t.env)
	if !ok {
		return wait, nil
	}
	t.mu.Lock()
	inflight := len(t.inflight) > 0
	t.mu.Unlock()
	wait, _, err := dz.sweep(ctx, wait, inflight, func(ctx context.Context, now int64) (script.SweepResult, error) {
		return script.Sweep(ctx, t.src.rdb, dz.Key, t.src.key, now, script.SweepBatch, wire.FieldPayload)
	})
	if err != nil {
		return wait, fmt.Errorf("stream %q: sweep delays from %q: %w", t.src.key, dz.Key, err)
	}
	return wait, nil
}

// parksDurably reports whether the mount keeps its delays in a durable delay set.
func (t *streamTransport) parksDurably() bool {
	_, ok := delaySetOf(t.env)
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
