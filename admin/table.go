package admin

import (
	"context"
	"fmt"
	"strconv"

	"github.com/settlekit/settle/inbox"
)

// TableDeadLetters is the dead letter dead of the SQL inbox ib (a dead-letter group of
// its table, or a dead-letter table) as a DeadLetterStore, read and acted on through
// the inbox's operator API. to is the group a replay moves rows to (required for a
// dead-letter group; "" for a dead-letter table, whose rows go back to the table);
// ReplayOption To overrides it.
//
// A row's Entry.ID is its id, Entry.Time its dead-at, DeadLetter.Error its last error
// and DeadLetter.Source the table's name. Filter.Reason matches the last error (a table
// keeps no reason); Filter.Headers and Filter.Source are refused. A Selection's Through
// is the newest row id shown (ids must be integers to bound by it; otherwise the rows
// shown are named one by one).
func TableDeadLetters(ib *inbox.Inbox, dead, to string) DeadLetterStore {
	return tableStore{ib: ib, dead: dead, to: to}
}

type tableStore struct {
	ib       *inbox.Inbox
	dead, to string
}

func (s tableStore) Key() string  { return s.ib.Table().Name + "/" + s.dead }
func (s tableStore) Kind() string { return "table" }

// filter is f as an inbox.Filter, and the reason regexp the rows must also match.
func (s tableStore) filter(f Filter) (inbox.Filter, *matcher, error) {
	if len(f.Headers) > 0 || f.Source != "" {
		return inbox.Filter{}, nil, fmt.Errorf("admin: %s: a dead row has no headers to filter on nor a source other than its table", s.Key())
	}
	m, err := Filter{Reason: f.Reason}.compile()
	if err != nil {
		return inbox.Filter{}, nil, err
	}
	tf := inbox.Filter{Error: f.Error, IDs: f.IDs, Since: f.Since, Until: f.Until}
	for _, b := range []struct {
		v   string
		set *int64
		add int64
	}{{f.After, &tf.FromID, 1}, {f.Through, &tf.ToID, 0}} {
		if b.v == "" {
			continue
		}
		n, err := strconv.ParseInt(b.v, 10, 64)
		if err != nil {
			return inbox.Filter{}, nil, fmt.Errorf("admin: %s: %q is not a row id (an integer)", s.Key(), b.v)
		}
		*b.set = n + b.add
	}
	return tf, m, nil
}

// rows reads the dead rows f selects, at most limit (0: all).
func (s tableStore) rows(ctx context.Context, f Filter, limit int) ([]DeadLetter, error) {
	tf, m, err := s.filter(f)
	if err != nil {
		return nil, err
	}
	read := limit
	if m.reason != nil {
		read = 0 // the reason is matched here, after the read
	}
	rows, err := s.ib.DeadRows(ctx, s.dead, tf, read)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for _, r := range rows {
		d := DeadLetter{
			Entry: Entry{HasPayload: true, Headers: r.Headers, ID: r.ID, Key: s.Key(), Payload: r.Payload, Size: int64(len(r.Payload)), Time: r.DeadAt},
			Error: r.LastError, Source: s.ib.Table().Name,
		}
		if m.reason != nil && !m.reason.MatchString(d.Error) {
			continue
		}
		out = append(out, d)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

func (s tableStore) Page(ctx context.Context, f Filter, limit int) ([]DeadLetter, error) {
	return s.rows(ctx, f, limit)
}

// Summary reads the rows f selects (the first sample of them; a table's dead letter is
// read in id order) and groups them; Total counts every row of the dead letter.
func (s tableStore) Summary(ctx context.Context, f Filter, sample int) (*DeadLetterSummary, error) {
	dls, err := s.rows(ctx, f, max(sample, 0))
	if err != nil {
		return nil, err
	}
	sum, err := summarize(s.Key(), func(each func(DeadLetter)) error {
		for _, d := range dls {
			each(d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if sample > 0 && len(dls) == sample {
		sum.Sampled = sample
	}
	v, err := s.ib.View(ctx, "", s.dead)
	if err != nil {
		return nil, err
	}
	sum.Total = v.Dead
	return sum, nil
}

// action resolves sel for the inbox: its filter, bounded by its Through and Count; a
// reason (matched here) becomes the ids it selects.
func (s tableStore) action(ctx context.Context, sel Selection, cfg actionConfig) (inbox.Filter, []inbox.ActionOption, error) {
	if err := cfg.check(); err != nil {
		return inbox.Filter{}, nil, err
	}
	tf, m, err := s.filter(sel.Filter)
	if err != nil {
		return inbox.Filter{}, nil, err
	}
	limit := cfg.bound(sel)
	if m.reason != nil {
		dls, err := s.rows(ctx, sel.Filter, limit)
		if err != nil {
			return inbox.Filter{}, nil, err
		}
		tf = inbox.Filter{IDs: make([]string, len(dls))}
		for k, d := range dls {
			tf.IDs[k] = d.ID
		}
		if len(tf.IDs) == 0 {
			tf.IDs = []string{} // selects none: the caller reports nothing to do
		}
	}
	var opts []inbox.ActionOption
	if cfg.dryRun {
		opts = append(opts, inbox.DryRun())
	}
	if limit > 0 {
		opts = append(opts, inbox.Limit(limit))
	}
	return tf, opts, nil
}

func (s tableStore) Replay(ctx context.Context, sel Selection, opts ...ReplayOption) (*ReplayResult, error) {
	cfg := configure(opts, ReplayOption.applyReplay)
	tf, iopts, err := s.action(ctx, sel, cfg)
	if err != nil {
		return nil, err
	}
	res := &ReplayResult{DryRun: cfg.dryRun}
	if tf.IDs != nil && len(tf.IDs) == 0 {
		return res, nil
	}
	to := s.to
	if cfg.to != "" {
		to = cfg.to
	}
	if s.ib.Table().Group != "" {
		iopts = append(iopts, inbox.To(to))
	}
	iopts = append(iopts, inbox.Rate(cfg.rate))
	r, err := s.ib.Replay(ctx, s.dead, tf, iopts...)
	if r == nil {
		return nil, err
	}
	res.Gone = r.Gone
	for _, id := range r.Replayed {
		res.Replayed = append(res.Replayed, Replayed{ID: id, To: r.To})
	}
	if cfg.dryRun {
		res.Selection = s.shown(sel.Filter, r.Replayed)
	} else {
		res.Meanwhile = meanwhile(sel, cfg, len(res.Replayed))
	}
	return res, err
}

func (s tableStore) Purge(ctx context.Context, sel Selection, opts ...PurgeOption) (*PurgeResult, error) {
	cfg := configure(opts, PurgeOption.applyPurge)
	tf, iopts, err := s.action(ctx, sel, cfg)
	if err != nil {
		return nil, err
	}
	res := &PurgeResult{DryRun: cfg.dryRun}
	if tf.IDs != nil && len(tf.IDs) == 0 {
		return res, nil
	}
	r, err := s.ib.Purge(ctx, s.dead, tf, iopts...)
	if r == nil {
		return nil, err
	}
	res.Deleted, res.IDs = r.Deleted, r.IDs
	if cfg.dryRun {
		res.Selection = s.shown(sel.Filter, r.IDs)
	} else {
		res.Meanwhile = meanwhile(sel, cfg, int(res.Deleted))
	}
	return res, err
}

// shown is the Selection of a dry run of f that showed the rows ids, in id order.
func (s tableStore) shown(f Filter, ids []string) *Selection {
	sel := &Selection{Count: len(ids), Filter: f}
	if len(ids) > 0 && len(f.IDs) == 0 {
		if _, err := strconv.ParseInt(ids[len(ids)-1], 10, 64); err == nil {
			sel.Filter.Through = ids[len(ids)-1]
		} else {
			sel.Filter.IDs = ids
		}
	}
	return sel
}
