package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/settlekit/settle/internal/pace"
)

// Filter selects dead rows, as admin.Filter selects dead letters. Its zero value
// selects them all; each field set narrows the selection (all of them must match).
type Filter struct {
	// Error selects the rows whose last error contains this substring (needs
	// Table.LastError).
	Error string
	// FromID and ToID select the rows whose integer id is in [FromID, ToID] (0: no
	// bound). A row whose id is not an integer is not selected when either is set.
	FromID, ToID int64
	// IDs selects these rows only (ids as text). Each must be in the dead letter and
	// match the rest of the filter: one that is not is an error wrapping ErrRowNotFound,
	// and nothing is changed.
	IDs []string
	// Since and Until select the rows dead-lettered at or after Since, at or before
	// Until (needs Table.DeadAt; the zero time: no bound).
	Since, Until time.Time
}

// check returns why f cannot select rows of table t.
func (f Filter) check(t Table) error {
	var errs []error
	if f.Error != "" && t.LastError == "" {
		errs = append(errs, fmt.Errorf("inbox: filter: Error %q needs a last-error column (Table.LastError) on %s", f.Error, t.Name))
	}
	if (!f.Since.IsZero() || !f.Until.IsZero()) && t.DeadAt == "" {
		errs = append(errs, fmt.Errorf("inbox: filter: Since/Until need a dead-at column (Table.DeadAt) on %s", t.Name))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		errs = append(errs, fmt.Errorf("inbox: filter: Until %s is before Since %s", f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano)))
	}
	if f.ToID != 0 && f.ToID < f.FromID {
		errs = append(errs, fmt.Errorf("inbox: filter: ToID %d is below FromID %d", f.ToID, f.FromID))
	}
	return errors.Join(errs...)
}

func (f Filter) match(r Row) bool {
	if f.FromID != 0 || f.ToID != 0 {
		n, err := strconv.ParseInt(r.ID, 10, 64)
		if err != nil || (f.FromID != 0 && n < f.FromID) || (f.ToID != 0 && n > f.ToID) {
			return false
		}
	}
	if len(f.IDs) > 0 {
		in := false
		for _, id := range f.IDs {
			in = in || id == r.ID
		}
		if !in {
			return false
		}
	}
	switch {
	case f.Error != "" && !strings.Contains(r.LastError, f.Error),
		!f.Since.IsZero() && (r.DeadAt.IsZero() || r.DeadAt.Before(f.Since.Truncate(time.Microsecond))),
		!f.Until.IsZero() && (r.DeadAt.IsZero() || r.DeadAt.After(f.Until)):
		return false
	}
	return true
}

// ActionOption configures Replay and Purge: DryRun, Limit, Rate, To (as admin's
// options configure its Replay and Purge).
type ActionOption interface {
	applyAction(*actionConfig)
}

type actionConfig struct {
	dryRun bool
	limit  int
	rate   float64
	to     string
	toSet  bool
}

type actionOptionFunc func(*actionConfig)

func (f actionOptionFunc) applyAction(c *actionConfig) { f(c) }

// DryRun makes Replay or Purge change nothing: it selects and checks as it would, and
// reports what it would move or delete. Defaults to off.
func DryRun() ActionOption { return actionOptionFunc(func(c *actionConfig) { c.dryRun = true }) }

// Limit bounds Replay or Purge to the first n rows its filter selects, in id order. n
// must not be negative. Defaults to 0: no bound.
func Limit(n int) ActionOption { return actionOptionFunc(func(c *actionConfig) { c.limit = n }) }

// Rate bounds Replay to perSecond rows a second (one statement a row), so the
// consumers of the group are not flooded. perSecond must not be negative. Defaults to
// 0: as fast as the database answers, up to 200 rows a statement.
func Rate(perSecond float64) ActionOption {
	return actionOptionFunc(func(c *actionConfig) { c.rate = perSecond })
}

// To names the group Replay moves the rows to. Required for a dead-letter group (its
// rows no longer say which group they came from); refused for a dead-letter table
// (its rows go back to the inbox's table, which has no groups).
func To(group string) ActionOption {
	return actionOptionFunc(func(c *actionConfig) { c.to, c.toSet = group, true })
}

// ReplayResult is what a replay moved (or, in a dry run, would move).
type ReplayResult struct {
	// DryRun reports that nothing was moved: Replayed is what would have been.
	DryRun bool
	// Gone lists the rows selected that were no longer in the dead letter when their
	// turn came (another replay or a purge took them first): nothing was written for them.
	Gone []string
	// Replayed lists the ids of the rows moved, in order.
	Replayed []string
	// To is the group the rows went to ("" for a table without a group column).
	To string
}

// Replay moves the rows of the dead letter dead (a group of the table, or a dead-letter
// table) that f selects back to the inbox, in id order: due now, attempt 1, lease,
// last error and dead-at cleared. From a dead-letter group each batch is one UPDATE of
// the rows still in that group, to the group To names; from a dead-letter table the
// rows are inserted into the inbox's table (same ids) and deleted from the dead letter
// in one transaction. A row already moved is no longer in the dead letter and is not
// moved again (ReplayResult.Gone), so a replay run again, or after a crash, moves
// nothing twice. The queues of the group are woken as Publish wakes them.
//
// Before anything moves, the inbox, dead, f and the options are checked and refused with
// an error naming the problem: a column the spec names that a table lacks, no To for a
// dead-letter group (or To naming dead itself), a filter on a column the spec does not
// name, an id of f.IDs not found.
func (ib *Inbox) Replay(ctx context.Context, dead string, f Filter, opts ...ActionOption) (*ReplayResult, error) {
	d, cfg, err := ib.action(opts)
	if err != nil {
		return nil, err
	}
	switch tb := ib.table; {
	case tb.Group != "" && (!cfg.toSet || cfg.to == ""):
		return nil, fmt.Errorf("inbox: replay from the dead-letter group %q of %s: name the group to move the rows to (To): a dead row keeps no group of its own", dead, tb.Name)
	case tb.Group != "" && cfg.to == dead:
		return nil, fmt.Errorf("inbox: replay: To(%q) is the dead-letter group itself", dead)
	case tb.Group == "" && cfg.toSet:
		return nil, fmt.Errorf("inbox: replay: To(%q): table %s has no group column, its dead rows go back to the table", cfg.to, tb.Name)
	}
	sel, err := ib.selection(ctx, d, dead, f, cfg.limit)
	if err != nil {
		return nil, err
	}
	res := &ReplayResult{DryRun: cfg.dryRun, To: cfg.to}
	if cfg.dryRun {
		for _, r := range sel {
			res.Replayed = append(res.Replayed, r.ID)
		}
		return res, nil
	}
	s := ib.table.adminStatements(d.admin(), dead)
	err = ib.each(ctx, d, s, dead, sel, cfg.rate, func(tx txn, vals map[string]any, n int) error {
		vals["to"] = cfg.to
		if s.moveN != nil {
			return exec(ctx, tx, s.moveN(n), vals)
		}
		if err := exec(ctx, tx, s.insertN(n), vals); err != nil {
			return err
		}
		return exec(ctx, tx, s.deleteN(n), vals)
	}, func(moved, gone []string) {
		res.Replayed, res.Gone = append(res.Replayed, moved...), append(res.Gone, gone...)
		if len(moved) > 0 {
			ib.announce(ctx, ib.statements(d), cfg.to)
		}
	})
	if err != nil {
		return res, fmt.Errorf("inbox: replay from %q of %s stopped after %d of %d: %w", dead, ib.table.Name, len(res.Replayed)+len(res.Gone), len(sel), err)
	}
	return res, nil
}

// PurgeResult is what a purge deleted (or, in a dry run, would delete).
type PurgeResult struct {
	// Deleted counts the rows deleted (0 in a dry run).
	Deleted int64
	// DryRun reports that nothing was deleted.
	DryRun bool
	// IDs lists the rows selected, in order.
	IDs []string
}

// Purge deletes the rows of the dead letter dead that f selects (a row already gone is
// not counted, so a purge run again deletes nothing). It takes DryRun and Limit (Rate
// and To are refused), and checks its selection as Replay does.
func (ib *Inbox) Purge(ctx context.Context, dead string, f Filter, opts ...ActionOption) (*PurgeResult, error) {
	d, cfg, err := ib.action(opts)
	if err != nil {
		return nil, err
	}
	if cfg.toSet || cfg.rate != 0 {
		return nil, errors.New("inbox: purge takes DryRun and Limit only, not To or Rate")
	}
	sel, err := ib.selection(ctx, d, dead, f, cfg.limit)
	if err != nil {
		return nil, err
	}
	res := &PurgeResult{DryRun: cfg.dryRun}
	for _, r := range sel {
		res.IDs = append(res.IDs, r.ID)
	}
	if cfg.dryRun {
		return res, nil
	}
	s := ib.table.adminStatements(d.admin(), dead)
	err = ib.each(ctx, d, s, dead, sel, 0, func(tx txn, vals map[string]any, n int) error {
		return exec(ctx, tx, s.deleteN(n), vals)
	}, func(deleted, _ []string) { res.Deleted += int64(len(deleted)) })
	if err != nil {
		return res, fmt.Errorf("inbox: purge of %q of %s stopped after %d deleted: %w", dead, ib.table.Name, res.Deleted, err)
	}
	return res, nil
}

// action checks the inbox and the options of Replay or Purge.
func (ib *Inbox) action(opts []ActionOption) (dialect, actionConfig, error) {
	var cfg actionConfig
	for _, o := range opts {
		if o != nil {
			o.applyAction(&cfg)
		}
	}
	d, err := ib.checked("")
	if err != nil {
		return nil, cfg, err
	}
	var errs []error
	if cfg.limit < 0 {
		errs = append(errs, fmt.Errorf("inbox: Limit(%d) is negative", cfg.limit))
	}
	if cfg.rate < 0 {
		errs = append(errs, fmt.Errorf("inbox: Rate(%g) is negative", cfg.rate))
	}
	return d, cfg, errors.Join(errs...)
}

// each applies write to the rows of sel in batches (one row a batch at a rate, paced),
// each in one transaction that first locks the batch's rows still in the dead letter
// dead (write gets their ids bound as :id<i>, n of them, with :dead and :skew); done
// gets the ids written and those gone.
func (ib *Inbox) each(ctx context.Context, d dialect, s *adminStatements, dead string, sel []Row, rate float64, write func(tx txn, vals map[string]any, n int) error, done func(written, gone []string)) error {
	size := maxBatchRows
	if rate > 0 {
		size = 1
	}
	pacer := pace.New(rate)
	defer pacer.Stop()
	for start := 0; start < len(sel); start += size {
		if start > 0 {
			if err := pacer.Wait(ctx); err != nil {
				return err
			}
		}
		batch := sel[start:min(start+size, len(sel))]
		written, err := retry(ctx, d, ib.db, func() ([]any, error) { return ib.writeBatch(ctx, d, s, dead, batch, write) })
		if err != nil {
			return err
		}
		in := make(map[string]bool, len(written))
		var ids []string
		for _, id := range written {
			in[idString(id)] = true
			ids = append(ids, idString(id))
		}
		var gone []string
		for _, r := range batch {
			if !in[r.ID] {
				gone = append(gone, r.ID)
			}
		}
		done(ids, gone)
	}
	return nil
}

// writeBatch locks the rows of batch still in the dead letter and writes them, in one
// transaction, and returns their ids.
func (ib *Inbox) writeBatch(ctx context.Context, d dialect, s *adminStatements, dead string, batch []Row, write func(tx txn, vals map[string]any, n int) error) ([]any, error) {
	tx, err := d.begin(ctx, ib.db)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	vals := map[string]any{"dead": dead, "skew": d.skewArg(0)}
	for i, r := range batch {
		vals[fmt.Sprintf("id%d", i)] = r.id
	}
	lock := s.lockN(len(batch))
	ids, err := queryIDs(ctx, tx, lock.text, lock.bind(vals))
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	locked := map[string]any{"dead": dead, "skew": d.skewArg(0)}
	for i, id := range ids {
		locked[fmt.Sprintf("id%d", i)] = id
	}
	if err := write(tx, locked, len(ids)); err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}

// exec runs st in tx.
func exec(ctx context.Context, tx txn, st stmt, vals map[string]any) error {
	_, err := tx.ExecContext(ctx, st.text, st.bind(vals)...)
	return err
}
