package console

import (
	"context"
	"errors"

	"github.com/settlekit/settle/admin"
)

// deadStore is the dead letter of a Redis mount: a stream for a stream kind, a list for
// a list kind, read and acted on through the calls of admin for its type.
type deadStore struct {
	insp *admin.Inspector
	key  string
	list bool
}

// deadLetters returns the dead letter of m.
func (c *Console) deadLetters(m Mount) deadStore {
	return deadStore{insp: c.opts.Admin, key: m.DeadLetter, list: !m.isStream()}
}

// page returns at most limit dead letters f selects, oldest first; a missing stream
// holds none.
func (s deadStore) page(ctx context.Context, f admin.Filter, limit int) ([]admin.DeadLetter, error) {
	if !s.list {
		dls, err := s.insp.DeadLetters(ctx, s.key, f, limit)
		if errors.Is(err, admin.ErrKeyNotFound) {
			return nil, nil
		}
		return dls, err
	}
	lds, err := s.insp.ListDeadLetters(ctx, s.key, f, limit)
	dls := make([]admin.DeadLetter, len(lds))
	for k, d := range lds {
		dls[k] = d.DeadLetter
	}
	return dls, err
}

// summary counts and groups the dead letters f selects; a missing stream holds none.
func (s deadStore) summary(ctx context.Context, f admin.Filter) (*admin.DeadLetterSummary, error) {
	if s.list {
		return s.insp.ListDeadLetterSummary(ctx, s.key, f)
	}
	sum, err := s.insp.DeadLetterSummary(ctx, s.key, f)
	if errors.Is(err, admin.ErrKeyNotFound) {
		return &admin.DeadLetterSummary{Key: s.key}, nil
	}
	return sum, err
}

// replay is admin's Replay (or ReplayList) of the dead letters f selects.
func (s deadStore) replay(ctx context.Context, f admin.Filter, opts ...admin.ReplayOption) (*admin.ReplayResult, error) {
	if s.list {
		return s.insp.ReplayList(ctx, s.key, f, opts...)
	}
	return s.insp.Replay(ctx, s.key, f, opts...)
}

// purge is admin's Purge (or PurgeList) of the dead letters f selects.
func (s deadStore) purge(ctx context.Context, f admin.Filter, opts ...admin.PurgeOption) (*admin.PurgeResult, error) {
	if s.list {
		return s.insp.PurgeList(ctx, s.key, f, opts...)
	}
	return s.insp.Purge(ctx, s.key, f, opts...)
}
