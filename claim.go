package settle

import (
	"context"
	"errors"
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

// ClaimingStream returns a source that reads the stream key through the consumer group
// group like Stream does (same options, same wire format, same dead letters), except for
// how a delivery comes again:
//
//   - Retry leaves the entry pending where it is: nothing is copied and it keeps its id
//     (the retries of concurrent handlers are left in one round trip). Before each read
//     of new entries, the subscription takes back its own retries that have waited
//     minIdle (XCLAIM of their ids), and now and then scans for the group's entries idle
//     for at least minIdle (XAUTOCLAIM, at most as many as it has free handler slots):
//     those of consumers that crashed or hung. One consumer of the group starts such a
//     scan per poll (the shorter of minIdle/2 and the read's Block), the others leave
//     it to that one. So a Retry comes back after minIdle.
//   - The attempt is the retry-count header (0 for a message that was never copied) plus
//     Redis's delivery counter for the entry, which counts every delivery to any
//     consumer, crashed ones included: a message that kills its worker still reaches
//     MaxAttempts and is dead-lettered then, with its retry count set to the cap.
//   - RetryAfter(d) has no wait of its own but minIdle: without a durable delay set a
//     shorter d is rounded up to minIdle and a longer one cut to it (a warning is logged
//     once per mount), so choose minIdle as the backoff. With
//     DelayIn(delayed.DurableZset{…}) each delay is kept as asked: the retry copy
//     (retry count set to the attempt) is parked and the original acknowledged.
//   - While a handler runs, its entry is kept from being claimed by other consumers: every
//     minIdle/3 (on the App's clock) the subscription resets the idle time of the entries
//     it is handling, which does not count as a delivery. So minIdle may be short without
//     a long handler's entry being handled twice.
//
// A restarted consumer does not re-read its own pending entries at once (they may be
// retries waiting out minIdle): they come back through the claim like any other.
// Reclaim is not an option of a claiming stream, which always claims after minIdle.
// minIdle must be at least a millisecond.
func ClaimingStream(rdb redis.UniversalClient, key, group string, minIdle time.Duration, opts ...StreamOption) *ClaimingStreamSource {
	return &ClaimingStreamSource{minIdle: minIdle, stream: Stream(rdb, key, group, opts...)}
}

// Transport is for settle's own use and may change in any release.
func (s *ClaimingStreamSource) Transport(env source.Env) source.Transport {
	st := s.stream.Transport(env).(*streamTransport)
	t := &claimTransport{reclaim: st.claim, streamTransport: st}
	st.claim = newClaimer("ClaimingStream minIdle", s.minIdle, s.stream.cfg.block, true, s.onBeat)
	st.rescan = false
	return t
}

// claimTransport is a streamTransport whose retries stay pending and are claimed back.
type claimTransport struct {
	*streamTransport
	reclaim *claimer // what a Reclaim option asked for: refused
}

func (t *claimTransport) Info() source.Info {
	info := t.streamTransport.Info()
	info.Caps.DeliveryCounter = true
	info.Caps.CountsUnsettled = true
	info.Caps.MinIdle = t.claim.idle
	info.Caps.RetryWithoutCap = source.ActionLeave
	return info
}

func (t *claimTransport) Validate(p source.Policy) []error {
	errs := t.streamTransport.Validate(p)
	if t.reclaim != nil {
		errs = append(errs, errors.New("Reclaim is not an option of a ClaimingStream: it always claims entries idle for minIdle"))
	}
	return errs
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
