package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// NewClaiming returns the transport of one ClaimingStream mount of the stream c
// describes: retries stay pending and are claimed back once idle for minIdle, by Redis's
// delivery counter. onBeat, when set (tests), is called after each heartbeat.
func NewClaiming(env source.Env, c Config, minIdle time.Duration, onBeat func()) source.Transport {
	st := newStream(env, c)
	st.claim = newClaimer(st.claimStream(), "ClaimingStream(…, minIdle %s)", minIdle, c.Block, true, onBeat)
	st.rescan = false
	return &claimTransport{streamTransport: st}
}

// claimTransport is a streamTransport whose retries stay pending and are claimed back.
type claimTransport struct {
	*streamTransport
}

func (t *claimTransport) Info() source.Info {
	info := t.streamTransport.Info()
	info.Caps.DeliveryCounter = true
	info.Caps.CountsUnsettled = true
	info.Caps.MinIdle = t.claim.idle
	info.Caps.RetryWithoutCap = source.ActionLeave
	return info
}

// Moves writes a batch as a Stream does, and leaves its left-pending retries
// (ActionLeave) pending at this consumer: their idle times restart now, in one touch
// script call (without counting a delivery), so each is claimed back minIdle after its
// retry, not minIdle after it was delivered.
func (t *claimTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	var leaves []*source.Delivery
	var rest []source.Move
	var restAt []int
	for i, m := range ms {
		if m.Action == source.ActionLeave {
			leaves = append(leaves, m.Delivery)
		} else {
			rest, restAt = append(rest, m), append(restAt, i)
		}
	}
	if len(rest) > 0 {
		restErrs := make([]error, len(rest))
		t.writeMoves(ctx, rest, restErrs)
		for k, i := range restAt {
			errs[i] = restErrs[k]
			t.settledIDs(errs[i], ms[i].Delivery)
		}
	}
	if len(leaves) > 0 {
		if err := t.leave(ctx, leaves); err != nil {
			for i, m := range ms {
				if m.Action == source.ActionLeave {
					errs[i] = err
				}
			}
		}
	}
	return errs
}

// leave leaves ds pending here, restarting their idle times in one touch script call.
// They are forgotten as in flight either way: an entry whose touch failed is still
// pending, and is claimed back once idle (sooner than asked, not lost).
func (t *claimTransport) leave(ctx context.Context, ds []*source.Delivery) error {
	c, s := t.claim, t.cfg
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	c.serial.Lock()
	_, err := script.Touch(ctx, s.Client, s.Key, s.Group, t.consumer, ids...)
	at := t.env.Clock.Now()
	t.settledIDs(nil, ds...)
	c.serial.Unlock()
	c.left(at, ids)
	if err != nil {
		if len(ids) == 1 {
			return fmt.Errorf("stream %q: leave %s pending: %w", s.Key, ids[0], err)
		}
		return fmt.Errorf("stream %q: leave %d entries pending: %w", s.Key, len(ids), err)
	}
	return nil
}
