package admin

import (
	"context"
	"time"
)

// DeadLetterStore is one dead letter of any kind, read and acted on by the same calls:
// a dead-letter stream ([Inspector.StreamDeadLetters]), a dead-letter list
// ([Inspector.ListDeadLetterStore]) or an inbox's dead rows (an implementation over
// settle/inbox, which the console and the command line provide). The command line and
// the console write each verb once, against this interface.
type DeadLetterStore interface {
	// Key names the dead letter: its key, or "table/dead" for an inbox's.
	Key() string
	// Kind is "stream", "list" or "table".
	Kind() string
	// Page returns at most limit dead letters f selects, oldest first (limit <= 0:
	// all), each field cut to PageCut bytes (Entry.Cut, Entry.Size). With a limit it
	// reads at most PageScan entries of a stream: a page the filter did not fill by
	// then comes with a *ScanBoundError naming the cursor to read on from. A dead-letter stream that does not exist is an error wrapping
	// ErrKeyNotFound; a list that does not exist holds none (Redis deletes an emptied
	// list).
	Page(ctx context.Context, f Filter, limit int) ([]DeadLetter, error)
	// Summary counts and groups the dead letters f selects among the newest sample
	// (DefaultSample, say; 0: all, which reads the whole dead letter), and says how many
	// the key holds in all.
	Summary(ctx context.Context, f Filter, sample int) (*DeadLetterSummary, error)
	// Replay moves the dead letters of sel back where they came from (see
	// Inspector.Replay); a dry run's result carries the Selection to confirm.
	Replay(ctx context.Context, sel Selection, opts ...ReplayOption) (*ReplayResult, error)
	// Purge deletes the dead letters of sel (see Inspector.Purge); a dry run's result
	// carries the Selection to confirm.
	Purge(ctx context.Context, sel Selection, opts ...PurgeOption) (*PurgeResult, error)
}

// Selection is the set of dead letters an action may touch. A dry run returns the one
// it showed (ReplayResult.Selection, PurgeResult.Selection): its filter bounded by the
// newest dead letter it saw (Filter.Through) and the count it saw. Acting on that
// Selection touches at most those dead letters, never one that arrived after the dry
// run, and reports how many of them were gone meanwhile (the Meanwhile of the results).
// The zero Count is no bound: the filter as it selects when the action runs.
type Selection struct {
	// Count is how many dead letters the operator was shown: the action touches at most
	// this many. 0: no bound.
	Count int
	// Filter selects them; its Through is the newest shown.
	Filter Filter
}

// Bounded reports whether s was fixed by a dry run.
func (s Selection) Bounded() bool { return s.Count > 0 }

// filter is the Filter an action on s runs: a bounded one skips an id gone meanwhile
// instead of refusing.
func (s Selection) filter() Filter {
	f := s.Filter
	f.lenient = s.Bounded()
	return f
}

// selectionOf is the Selection a dry run of f shows when it selects sel: Through is the
// newest of sel (an entry id for a stream, the newest dead-at for a list).
func selectionOf(f Filter, sel []DeadLetter, list bool) *Selection {
	s := &Selection{Count: len(sel), Filter: f}
	if len(sel) == 0 || len(f.IDs) > 0 {
		return s
	}
	if !list {
		s.Filter.Through = sel[len(sel)-1].ID
		return s
	}
	var newest time.Time
	for _, d := range sel {
		if d.Time.After(newest) {
			newest = d.Time
		}
	}
	if !newest.IsZero() {
		s.Filter.Through = newest.Format(time.RFC3339Nano)
	}
	return s
}

// StreamDeadLetters is the dead-letter stream key as a DeadLetterStore.
func (i *Inspector) StreamDeadLetters(key string) DeadLetterStore { return redisStore{i, key, false} }

// ListDeadLetterStore is the dead-letter list key as a DeadLetterStore.
func (i *Inspector) ListDeadLetterStore(key string) DeadLetterStore { return redisStore{i, key, true} }

// redisStore is a dead-letter stream, or a list.
type redisStore struct {
	i    *Inspector
	key  string
	list bool
}

func (s redisStore) Key() string { return s.key }

func (s redisStore) Kind() string {
	if s.list {
		return "list"
	}
	return "stream"
}

func (s redisStore) Page(ctx context.Context, f Filter, limit int) ([]DeadLetter, error) {
	if s.list {
		lds, err := s.i.ListDeadLetters(ctx, s.key, f, limit)
		return plainDeadLetters(lds), err
	}
	maxRead := 0
	if limit > 0 {
		maxRead = PageScan
	}
	return s.i.deadLetters(ctx, s.key, f, limit, PageCut, maxRead)
}

func (s redisStore) Summary(ctx context.Context, f Filter, sample int) (*DeadLetterSummary, error) {
	if s.list {
		return s.i.sampleListSummary(ctx, s.key, f, sample)
	}
	return s.i.sampleSummary(ctx, s.key, f, sample)
}

func (s redisStore) Replay(ctx context.Context, sel Selection, opts ...ReplayOption) (*ReplayResult, error) {
	if s.list {
		return s.i.replayList(ctx, s.key, sel, opts)
	}
	return s.i.replayStream(ctx, s.key, sel, opts)
}

func (s redisStore) Purge(ctx context.Context, sel Selection, opts ...PurgeOption) (*PurgeResult, error) {
	if s.list {
		return s.i.purgeList(ctx, s.key, sel, opts)
	}
	return s.i.purgeStream(ctx, s.key, sel, opts)
}

// plainDeadLetters is lds without their list positions.
func plainDeadLetters(lds []ListDeadLetter) []DeadLetter {
	dls := make([]DeadLetter, len(lds))
	for k, d := range lds {
		dls[k] = d.DeadLetter
	}
	return dls
}
