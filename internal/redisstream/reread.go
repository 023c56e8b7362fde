package redisstream

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// readOwnPending re-reads entries delivered to this consumer and not settled (after a
// restart with a stable consumer name, a dropped connection or a failed settlement),
// skipping those in flight here.
func (t *streamTransport) readOwnPending(ctx context.Context, max int) ([]*source.Delivery, error) {
	t.ahead.Lock() // no read ahead out meanwhile (see streamTransport.ahead)
	defer t.ahead.Unlock()
	for {
		t.mu.Lock()
		cursor, asked := t.cursor, t.rescans
		t.fence.begin()
		t.mu.Unlock()
		msgs, err := t.xread(ctx, cursor, max, -1)
		t.mu.Lock()
		unsettled := t.fence.end(msgs)
		if err != nil {
			t.mu.Unlock()
			return nil, err
		}
		if len(msgs) == 0 {
			// Done, unless a settlement failed (or a read was lost) while this read was
			// out: its entry may lie before the cursor, so the next Fetch reads again.
			if t.rescans == asked {
				t.rescan, t.cursor = false, "0"
			}
			t.mu.Unlock()
			return nil, nil
		}
		t.cursor = msgs[len(msgs)-1].ID
		t.mu.Unlock()
		if ds := t.deliveries(ctx, unsettled, false); len(ds) > 0 {
			for _, d := range ds {
				d.Redelivered = true
			}
			t.countDeliveries(ctx, ds, len(msgs))
			return ds, nil
		}
	}
}

// rereadFence keeps a re-read of a consumer's own pending entries from handing out an
// entry a second time after its settlement succeeded.
//
// The re-read and a settlement travel on different connections: Redis may run the read
// before the settlement's XACK (or script) and the reply may reach the consumer after the
// settlement's, once the entry is no longer in flight here. Such an entry was settled;
// delivering it again would run its handler twice. The fence remembers the entries whose
// settlement succeeded while a re-read was out, and the re-read drops them. A
// settlement that completed before the read was sent needs no fence: Redis ran it
// before the read, which cannot return the entry.
//
// The transport's mutex guards it; one re-read is out at a time (the fetch loop is
// serial).
type rereadFence struct {
	reading bool
	settled map[string]struct{}
}

// begin marks a re-read sent.
func (f *rereadFence) begin() {
	f.reading = true
	clear(f.settled)
}

// note records entries whose settlement succeeded; only a re-read out needs them.
func (f *rereadFence) note(id string) {
	if !f.reading {
		return
	}
	if f.settled == nil {
		f.settled = map[string]struct{}{}
	}
	f.settled[id] = struct{}{}
}

// end marks the re-read's reply received and returns its entries less those settled
// meanwhile.
func (f *rereadFence) end(msgs []redis.XMessage) []redis.XMessage {
	f.reading = false
	if len(f.settled) == 0 {
		return msgs
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		if _, done := f.settled[m.ID]; !done {
			kept = append(kept, m)
		}
	}
	clear(f.settled)
	return kept
}

// countDeliveries sets the attempt of re-read deliveries from Redis's delivery counter:
// the retry-count header plus the times Redis delivered the entry (this re-read
// included), as a claim does. A re-read entry was delivered before and never settled
// (its consumer crashed or lost the read's reply, or its settlement failed), and that
// delivery spends an attempt: a message that kills its consumer reaches the cap even
// when the consumer restarts under the same name. Should the count be unreadable, the
// attempt stays the header's, and a warning says so. span is how many entries the re-read
// returned (those in flight here included): the pending entries of this consumer from
// the first delivery to the last, which one XPENDING lists.
func (t *streamTransport) countDeliveries(ctx context.Context, ds []*source.Delivery, span int) {
	if len(ds) == 0 {
		return
	}
	s := t.cfg
	pending, err := s.Client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.Key, Group: s.Group, Consumer: t.consumer,
		Start: ds[0].ID, End: ds[len(ds)-1].ID, Count: int64(max(span, len(ds))),
	}).Result()
	if err != nil {
		t.env.Logger.WarnContext(ctx, "settle: could not read the delivery counts of re-read pending entries; their attempts count settlements only",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.Any(source.AttrError, err))
		return
	}
	counts := make(map[string]int64, len(pending))
	for _, p := range pending {
		counts[p.ID] = p.RetryCount
	}
	for _, d := range ds {
		if n := counts[d.ID]; n > 1 {
			d.Attempt = d.RetryCount + int(n)
		}
	}
}

// TakeOver claims every entry of the group pending to another consumer (XPENDING, then
// XCLAIM JUSTID with no min idle, their delivery counts kept: the re-read counts
// the delivery) and has the next Fetch re-read them
// with this consumer's own pending entries: a partitioned stream's new owner of a
// partition calls it once it holds the partition's lease, so that the partition's
// unsettled entries come first, and a former owner's settlements of them, fenced on the
// entry being pending to the settling consumer, fail. It returns how many it claimed.
func (t *streamTransport) TakeOver(ctx context.Context) (int, error) {
	s := t.cfg
	n, start := 0, "-"
	for {
		ps, err := s.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.Key, Group: s.Group, Start: start, End: "+", Count: 100}).Result()
		if err != nil {
			return n, fmt.Errorf("stream %q: take over: xpending: %w", s.Key, err)
		}
		byCount := map[int64][]any{} // the ids to claim, by delivery count, kept as it is
		for _, p := range ps {
			if p.Consumer != t.consumer {
				byCount[p.RetryCount] = append(byCount[p.RetryCount], p.ID)
			}
		}
		for count, ids := range byCount {
			args := append([]any{"XCLAIM", s.Key, s.Group, t.consumer, 0}, ids...)
			claimed, err := s.Client.Do(ctx, append(args, "RETRYCOUNT", count, "JUSTID")...).StringSlice()
			if err != nil {
				return n, fmt.Errorf("stream %q: take over: xclaim: %w", s.Key, err)
			}
			n += len(claimed)
		}
		if len(ps) < 100 {
			break
		}
		start = "(" + ps[len(ps)-1].ID
	}
	t.markRescan()
	return n, nil
}

// KeepAttempt records d.Attempt in its entry's delivery count (source.AttemptKeeper),
// fenced on the entry being pending to this consumer: the re-read that follows a crash
// or a stop counts the attempts spent in place. The count is the attempt less the
// retry-count header, as countDeliveries reads it back.
func (t *streamTransport) KeepAttempt(ctx context.Context, d *source.Delivery) error {
	t.mu.Lock()
	orphaned := t.orphaned[d.ID]
	t.mu.Unlock()
	if orphaned {
		return &groupMadeAgainError{key: t.cfg.Key, group: t.cfg.Group, id: d.ID}
	}
	if err := script.KeepAttempt(ctx, t.cfg.Client, t.cfg.Key, t.cfg.Group, t.consumer, d.ID, max(d.Attempt-d.RetryCount, 1)); err != nil {
		return fmt.Errorf("stream %q: keep the attempt of %s: %w", t.cfg.Key, d.ID, err)
	}
	return nil
}

// Forget stops counting ds as in flight here without settling them (no heartbeat, no
// re-read): a partitioned stream's member whose lease on the partition was lost leaves
// them to the new owner, who took them over or takes them once idle.
func (t *streamTransport) Forget(ds ...*source.Delivery) {
	t.settledIDs(script.ErrNotOwner, ds...)
}
