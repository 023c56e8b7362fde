package settle

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// ClaimingStreamSource reads a Redis stream through a consumer group and keeps failed
// entries pending, to be claimed back once idle. Make one with ClaimingStream.
type ClaimingStreamSource struct {
	minIdle time.Duration
	onBeat  func() // tests: called after each heartbeat
	stream  *StreamSource
}

var _ Source = (*ClaimingStreamSource)(nil)

// ClaimingStream returns a source that reads the stream key through the group group like
// Stream, but leaves a retried entry pending, to be claimed back (XCLAIM, XAUTOCLAIM)
// once idle for minIdle, and counts attempts with Redis's delivery counter, crashed
// deliveries included. It also claims entries other consumers left idle that long
// (one at a time, each run alone once the last settled, as Reclaim does), and
// heartbeats the entries it is handling every minIdle/3 so that none is claimed from
// under a live handler. Without a durable delay set, RetryAfter waits minIdle whatever
// it asks (a warning says so once). minIdle must be at least a millisecond.
func ClaimingStream(rdb redis.UniversalClient, key, group string, minIdle time.Duration, opts ...ClaimingStreamOption) *ClaimingStreamSource {
	cfg := defaultStreamConfig()
	for _, o := range opts {
		if o != nil {
			o.applyClaimingStream(&cfg)
		}
	}
	return &ClaimingStreamSource{minIdle: minIdle, stream: &StreamSource{cfg: cfg, group: group, key: key, rdb: rdb}}
}

// Transport is for settle's own use and may change in any release.
func (s *ClaimingStreamSource) Transport(env source.Env) source.Transport {
	st := s.stream.Transport(env).(*streamTransport)
	t := &claimTransport{streamTransport: st}
	st.claim = newClaimer(st.claimStream(), "ClaimingStream minIdle", s.minIdle, s.stream.cfg.block, true, s.onBeat)
	st.rescan = false
	return t
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
	c, s := t.claim, t.src
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	c.serial.Lock()
	_, err := script.Touch(ctx, s.rdb, s.key, s.group, t.consumer, ids...)
	at := t.env.Clock.Now()
	t.settledIDs(nil, ds...)
	c.serial.Unlock()
	c.left(at, ids)
	if err != nil {
		if len(ids) == 1 {
			return fmt.Errorf("stream %q: leave %s pending: %w", s.key, ids[0], err)
		}
		return fmt.Errorf("stream %q: leave %d entries pending: %w", s.key, len(ids), err)
	}
	return nil
}

// Seek moves the consumer group's position back (or forward) to id (XGROUP SETID), like
// StreamSource.Seek: the entries after id are delivered again as new deliveries.
//
// Redis counts a replayed entry's deliveries from 1 again, so its attempt restarts: it is
// the retry-count header (unchanged by Seek) plus 1, and the MaxAttempts cap counts from
// the replay. An entry left pending by a Retry is delivered at once, without waiting out
// minIdle. One in flight here when the replay reaches it is not handled twice: it comes
// back after minIdle, like any retry, at the count the replay restarted.
func (s *ClaimingStreamSource) Seek(ctx context.Context, id string) error {
	return s.stream.Seek(ctx, id)
}
