package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// noteDelivered records id as delivered here, for recreateGroup. Called with t.mu held.
func (t *streamTransport) noteDelivered(id string) {
	if t.last == "" || script.IDAfter(id, t.last) {
		t.last = id
	}
}

// recreateGroup makes the stream and its group again, after a read or a claim met
// NOGROUP (the stream or the group was deleted under us), and logs it at Error. When the
// stream is gone too, the new group starts at "0": every entry written from then on is
// new, and one written in the millisecond of the last entry delivered here (or by a
// producer whose clock is behind) may have an id at or below it. When the stream is
// still there, the group starts at the greatest entry this consumer was delivered, or
// at "0" when it was delivered none, whatever StartAt asked for a new group: the
// entries the stream still holds after it are delivered, never skipped ("$" would skip
// every entry written while the group was missing). Entries up to it that were delivered to other consumers and
// not settled are no longer pending to anyone; this consumer's own in-flight entries
// are settled as usual (an ack applies; a copy or dead letter finds the entry no longer
// pending to it and writes nothing). A group another consumer made again meanwhile is
// used as it is.
func (t *streamTransport) recreateGroup(ctx context.Context) error {
	s := t.cfg
	t.mu.Lock()
	from := t.last
	t.mu.Unlock()
	// A stream written again between this check and the create holds only new entries,
	// so "0" stays right; one that exists here only grows.
	n, err := s.Client.Exists(ctx, s.Key).Result()
	if err != nil {
		return fmt.Errorf("stream %q: create group %q again: %w", s.Key, s.Group, err)
	}
	gone := n == 0
	if from == "" || gone {
		from = "0"
	}
	err = s.Client.XGroupCreateMkStream(ctx, s.Key, s.Group, from).Err()
	if err == nil || strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.orphan()
	}
	if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.env.Logger.ErrorContext(ctx, "settle: consumer group was missing; another consumer created it again",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrGroup, s.Group))
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %q: create group %q again from %s: %w", s.Key, s.Group, from, err)
	}
	if gone {
		t.env.Logger.ErrorContext(ctx, "settle: stream and consumer group were missing; created them again, delivering every entry written from now on",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrGroup, s.Group),
			slog.String("start_at", s.StartID))
		return nil
	}
	t.env.Logger.ErrorContext(ctx, "settle: consumer group was missing; created it again after the last entry this consumer was delivered",
		slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrGroup, s.Group),
		slog.String("from", from), slog.String("start_at", s.StartID))
	return nil
}

// orphan marks the entries in flight here as delivered by the group that is gone: the
// group made again holds none of them pending, so their copies and dead letters write
// nothing (the scripts answer NOTOWNER), and the log says why instead of a takeover.
func (t *streamTransport) orphan() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.inflight {
		if t.orphaned == nil {
			t.orphaned = map[string]bool{}
		}
		t.orphaned[id] = true
	}
}

// withoutOrphaned returns ms less the moves of orphaned entries (see orphan), setting
// each one's error in errs, and idx, the index in ms of each move kept; all is true
// when none was orphaned (kept is ms). Nothing is written for an orphaned entry: the
// group made again may hold another entry of the same id (a stream written again
// restarts its ids) or deliver this one anew, and a settlement meant for the group
// that is gone must not land on either.
func (t *streamTransport) withoutOrphaned(ms []source.Move, errs []error) (kept []source.Move, idx []int, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.orphaned) == 0 {
		return ms, nil, true
	}
	for i, m := range ms {
		if t.orphaned[m.Delivery.ID] {
			errs[i] = &groupMadeAgainError{key: t.cfg.Key, group: t.cfg.Group, id: m.Delivery.ID}
			continue
		}
		kept, idx = append(kept, m), append(idx, i)
	}
	return kept, idx, len(kept) == len(ms)
}

// unorphanedIDs returns the ids of ds that were not orphaned (see orphan): an ack of
// an orphaned entry has nothing to acknowledge, and must not land on an entry of the
// same id in the group made again.
func (t *streamTransport) unorphanedIDs(ds []*source.Delivery) []string {
	ids := make([]string, 0, len(ds))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		if !t.orphaned[d.ID] {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// groupMadeAgainError is the settlement error of an entry delivered before its
// consumer group was made again: nothing was written, and no consumer holds it.
type groupMadeAgainError struct{ key, group, id string }

func (e *groupMadeAgainError) Error() string {
	return fmt.Sprintf("stream %q: entry %s was delivered before group %q was made again (the stream or its group was deleted, or Redis lost its data): it is pending to no consumer now; nothing written",
		e.key, e.id, e.group)
}

// Is makes it a script.ErrNotOwner (and so a source.ErrTakenOver): the entry is not
// this consumer's to read again.
func (e *groupMadeAgainError) Is(target error) bool {
	return target == script.ErrNotOwner || target == source.ErrTakenOver
}
