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
// NOGROUP (the stream or the group was deleted under us), and logs it at Error. The new
// group starts at the greatest entry this consumer was delivered, or at "0" when it was
// delivered none, whatever StartAt asked for a new group: the entries the stream still
// holds after it are delivered, never skipped ("$" would skip every entry written while
// the group was missing). Entries up to it that were delivered to other consumers and
// not settled are no longer pending to anyone; this consumer's own in-flight entries
// are settled as usual (an ack applies; a copy or dead letter finds the entry no longer
// pending to it and writes nothing). A group another consumer made again meanwhile is
// used as it is.
func (t *streamTransport) recreateGroup(ctx context.Context) error {
	s := t.cfg
	t.mu.Lock()
	from := t.last
	t.mu.Unlock()
	if from == "" {
		from = "0"
	}
	err := s.Client.XGroupCreateMkStream(ctx, s.Key, s.Group, from).Err()
	if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.env.Logger.ErrorContext(ctx, "settle: consumer group was missing; another consumer created it again",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrGroup, s.Group))
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %q: create group %q again from %s: %w", s.Key, s.Group, from, err)
	}
	t.env.Logger.ErrorContext(ctx, "settle: consumer group was missing; created it again after the last entry this consumer was delivered",
		slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrGroup, s.Group),
		slog.String("from", from), slog.String("start_at", s.StartID))
	return nil
}
