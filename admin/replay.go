package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/pace"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// HeaderReplayedFrom is the header a replayed message carries: where it was replayed
// from, as "<dead-letter key>/<dead letter id>" (an entry id holds no "/", so the last
// "/" splits it). Like every settle header it is removed by the next replay, which
// writes its own.
const HeaderReplayedFrom = settle.HeaderPrefix + "replayed-from"

// ReplayOption configures Inspector.Replay.
type ReplayOption interface {
	applyReplay(*actionConfig)
}

// PurgeOption configures Inspector.Purge.
type PurgeOption interface {
	applyPurge(*actionConfig)
}

type actionConfig struct {
	dryRun bool
	limit  int
	rate   float64
	to     string
}

// SelectionOption bounds what an action does to its selection (DryRun, Limit). It is a
// ReplayOption, a PurgeOption, a PendingOption, a DelayOption and a SeekOption.
type SelectionOption struct{ set func(*actionConfig) }

func (o SelectionOption) applyPurge(c *actionConfig)  { o.set(c) }
func (o SelectionOption) applyReplay(c *actionConfig) { o.set(c) }

// DryRun makes an action change nothing: it selects and checks as it would, and reports
// what it would move or delete. Defaults to off.
func DryRun() SelectionOption {
	return SelectionOption{set: func(c *actionConfig) { c.dryRun = true }}
}

// Limit bounds an action to the first n dead letters its filter selects, oldest first
// (the first n ids given, for pending entries; the first n members due, for a delay
// set). n must not be negative. Defaults to 0: no bound.
func Limit(n int) SelectionOption {
	return SelectionOption{set: func(c *actionConfig) { c.limit = n }}
}

type replayOptionFunc func(*actionConfig)

func (f replayOptionFunc) applyReplay(c *actionConfig) { f(c) }

// Rate bounds a replay to perSecond dead letters a second, so that the consumers of the
// destination are not flooded. perSecond must not be negative. Defaults to 0: as fast
// as Redis answers.
func Rate(perSecond float64) ReplayOption {
	return replayOptionFunc(func(c *actionConfig) { c.rate = perSecond })
}

// To sends every replayed dead letter to the stream key instead of the source each
// names (settle.HeaderDeadSource). Defaults to each dead letter's source.
func To(key string) ReplayOption {
	return replayOptionFunc(func(c *actionConfig) { c.to = key })
}

// selection returns the dead letters of key an action on sel configured by cfg acts
// on, or cfg's or sel's refusal.
func (i *Inspector) selection(ctx context.Context, key string, sel Selection, cfg actionConfig) ([]DeadLetter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return i.DeadLetters(ctx, key, sel.filter(), cfg.bound(sel))
}

// bound is how many dead letters an action on sel may touch: Limit, and a bounded
// Selection's Count (0: no bound).
func (cfg actionConfig) bound(sel Selection) int {
	switch {
	case !sel.Bounded():
		return cfg.limit
	case cfg.limit > 0:
		return min(cfg.limit, sel.Count)
	}
	return sel.Count
}

// meanwhile is how many of a bounded sel were gone when an action touched done of them
// (0 for an unbounded one or a dry run).
func meanwhile(sel Selection, cfg actionConfig, done int) int {
	if !sel.Bounded() || cfg.dryRun {
		return 0
	}
	return max(cfg.bound(sel)-done, 0)
}

// check refuses a negative Limit or Rate.
func (cfg actionConfig) check() error {
	var errs []error
	if cfg.limit < 0 {
		errs = append(errs, fmt.Errorf("admin: Limit(%d) is negative", cfg.limit))
	}
	if cfg.rate < 0 {
		errs = append(errs, fmt.Errorf("admin: Rate(%g) is negative", cfg.rate))
	}
	return errors.Join(errs...)
}

// ReplayResult is what a replay moved (or, in a dry run, would move).
type ReplayResult struct {
	// DryRun reports that nothing was moved: Replayed is what would have been.
	DryRun bool
	// Gone lists the dead letters selected that were gone when their turn came (another
	// replay or a purge took them first): nothing was written for them.
	Gone []string
	// Meanwhile counts, for a bounded Selection, the dead letters of its Count that were
	// not there to move (replayed or purged meanwhile; Gone included).
	Meanwhile int
	// Replayed lists the dead letters moved, in order.
	Replayed []Replayed
	// Selection is, in a dry run, the set it showed: pass it to the action to move those
	// and no other (DeadLetterStore.Replay).
	Selection *Selection
}

// Replayed is one dead letter moved back.
type Replayed struct {
	// ID is the dead letter's id (now deleted from the dead-letter stream).
	ID string
	// NewID is the id of the entry written to To ("" in a dry run).
	NewID string
	// To is the stream it was written to.
	To string
}

// Replay moves the dead letters of the dead-letter stream key that f selects back to
// the stream each was read from (settle.HeaderDeadSource), or to the one To names,
// oldest first. The message goes back as it was dead-lettered, payload and headers, but
// with settle's own headers (settle.HeaderPrefix: the retry count, the dead-letter
// headers) removed, so its attempts start again from the first, and HeaderReplayedFrom
// added. Each dead letter moves in one Lua script: the write to the destination and the
// deletion from the dead letter happen together or not at all, and a dead letter
// already gone is skipped (ReplayResult.Gone), so a replay run again, or after a crash,
// moves nothing twice.
//
// Before anything moves, the whole selection is checked, and refused with an error
// naming the problem: a missing key or one that is not a stream (the dead-letter stream
// or a destination: a destination must exist), an id of f.IDs not found, a reason
// regexp that does not compile, a dead letter that names no source when To is not
// given, a destination that is the dead-letter stream itself, and on Redis Cluster a
// destination in another hash slot (ErrCrossSlot; give both one {hash tag}).
//
// An error during the moves (the connection, ctx) stops the replay: the result says
// what moved before it, and running the replay again moves the rest.
//
// The dry run's result names the Selection it showed; StreamDeadLetters(key).Replay of
// that Selection moves those dead letters and none that arrived since.
func (i *Inspector) Replay(ctx context.Context, key string, f Filter, opts ...ReplayOption) (*ReplayResult, error) {
	return i.replayStream(ctx, key, Selection{Filter: f}, opts)
}

func (i *Inspector) replayStream(ctx context.Context, key string, s Selection, opts []ReplayOption) (*ReplayResult, error) {
	cfg := configure(opts, ReplayOption.applyReplay)
	sel, err := i.selection(ctx, key, s, cfg)
	if err != nil {
		return nil, err
	}
	return i.replay(ctx, key, "stream", s, sel, cfg, func(k int, to string) (string, bool, error) {
		return script.Replay(ctx, i.rdb, to, key, sel[k].ID, replayValues(key, sel[k]))
	})
}

// replay checks the destinations of sel, the dead letters of key (a "stream" or a
// "list") that s selects, and unless cfg is a dry run moves each in turn at cfg's rate
// with move(k, to), which moves sel[k] to to and reports its new id and whether it was
// still there to move.
func (i *Inspector) replay(ctx context.Context, key, kind string, s Selection, sel []DeadLetter, cfg actionConfig, move func(k int, to string) (newID string, moved bool, err error)) (res *ReplayResult, err error) {
	if err := i.checkDestinations(ctx, key, sel, cfg.to, kind); err != nil {
		return nil, err
	}
	res = &ReplayResult{DryRun: cfg.dryRun}
	if cfg.dryRun {
		for _, d := range sel {
			res.Replayed = append(res.Replayed, Replayed{ID: d.ID, To: destination(d, cfg.to)})
		}
		res.Selection = selectionOf(s.Filter, sel, kind == "list")
		return res, nil
	}
	defer func() { res.Meanwhile = meanwhile(s, cfg, len(res.Replayed)) }()
	pacer := pace.New(cfg.rate)
	defer pacer.Stop()
	for k, d := range sel {
		if k > 0 {
			if err := pacer.Wait(ctx); err != nil {
				return res, fmt.Errorf("admin: replay from %q stopped after %d of %d: %w", key, len(res.Replayed)+len(res.Gone), len(sel), err)
			}
		}
		to := destination(d, cfg.to)
		newID, moved, err := move(k, to)
		if err != nil {
			return res, fmt.Errorf("admin: replay of %s from %q to %q: %w", d.ID, key, to, err)
		}
		if !moved {
			res.Gone = append(res.Gone, d.ID)
			continue
		}
		res.Replayed = append(res.Replayed, Replayed{ID: d.ID, NewID: newID, To: to})
	}
	return res, nil
}

// destination is where dead letter d goes: to, or the source it names.
func destination(d DeadLetter, to string) string {
	if to != "" {
		return to
	}
	return d.Source
}

// checkDestinations refuses a selection any of whose dead letters could not be moved
// from the dead-letter key (of type kind: "stream", or "list", whose destinations may
// not exist yet): every problem, joined.
func (i *Inspector) checkDestinations(ctx context.Context, key string, sel []DeadLetter, to, kind string) error {
	var errs []error
	dests := map[string]bool{}
	var noSource []string
	for _, d := range sel {
		dest := destination(d, to)
		if dest == "" {
			noSource = append(noSource, d.ID)
			continue
		}
		dests[dest] = true
	}
	if len(noSource) > 0 {
		errs = append(errs, fmt.Errorf("admin: dead letters %s of %q name no source (no %s header): replay them with To", strings.Join(noSource, ", "), key, settle.HeaderDeadSource))
	}
	names := make([]string, 0, len(dests))
	for dest := range dests {
		names = append(names, dest)
	}
	sort.Strings(names)
	for _, dest := range names {
		if dest == key {
			errs = append(errs, fmt.Errorf("admin: cannot replay dead letters of %q into itself", key))
			continue
		}
		if i.checkSlots {
			if err := keys.SameSlot(key, dest); err != nil {
				errs = append(errs, fmt.Errorf("%w: replay from %q to %q is one script and must stay in one slot: %v", ErrCrossSlot, key, dest, err))
				continue
			}
		}
		if err := i.mustBe(ctx, dest, kind, "destination "+kind, kind == "list"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replayValues is the entry a replay of d writes: d's payload and its headers but
// settle's own, plus HeaderReplayedFrom.
func replayValues(key string, d DeadLetter) []any {
	headers := replayHeaders(key, d)
	var payload []byte
	if d.HasPayload {
		payload = d.Payload
		if payload == nil {
			payload = []byte{}
		}
	}
	return wire.StreamValues(payload, headers)
}

// PurgeResult is what a purge deleted (or, in a dry run, would delete).
type PurgeResult struct {
	// Deleted counts the dead letters deleted: those of IDs still there when deleted
	// (0 in a dry run).
	Deleted int64
	// DryRun reports that nothing was deleted.
	DryRun bool
	// IDs lists the dead letters selected, in order.
	IDs []string
	// Meanwhile counts, for a bounded Selection, the dead letters of its Count that were
	// not there to delete (replayed or purged meanwhile).
	Meanwhile int
	// Selection is, in a dry run, the set it showed: pass it to the action to delete
	// those and no other (DeadLetterStore.Purge).
	Selection *Selection
}

// replayHeaders are the headers a replay of d, a dead letter of key, writes: d's own
// but settle's (those hooks added, settle.HeaderHookPrefix, are kept: a tracer's link to
// the dead letter's span), plus HeaderReplayedFrom.
func replayHeaders(key string, d DeadLetter) map[string]string {
	headers := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		if !strings.HasPrefix(k, settle.HeaderPrefix) || strings.HasPrefix(k, settle.HeaderHookPrefix) {
			headers[k] = v
		}
	}
	headers[HeaderReplayedFrom] = key + "/" + d.ID
	return headers
}

// purgeResultOf is the result of a purge of sel, what s selects, before it deletes.
func purgeResultOf(s Selection, sel []DeadLetter, cfg actionConfig, list bool) *PurgeResult {
	res := &PurgeResult{DryRun: cfg.dryRun}
	for _, d := range sel {
		res.IDs = append(res.IDs, d.ID)
	}
	if cfg.dryRun {
		res.Selection = selectionOf(s.Filter, sel, list)
	}
	return res
}

// purgeBatch is how many entries one XDEL (or one pipeline of LREMs) of a purge deletes.
const purgeBatch = 100

// Purge deletes the dead letters of the dead-letter stream key that f selects (XDEL,
// in batches; each deletion is atomic and an entry already gone is not counted, so a
// purge run again deletes nothing). The selection is checked as Replay's is, before
// anything is deleted.
func (i *Inspector) Purge(ctx context.Context, key string, f Filter, opts ...PurgeOption) (*PurgeResult, error) {
	return i.purgeStream(ctx, key, Selection{Filter: f}, opts)
}

func (i *Inspector) purgeStream(ctx context.Context, key string, s Selection, opts []PurgeOption) (*PurgeResult, error) {
	cfg := configure(opts, PurgeOption.applyPurge)
	sel, err := i.selection(ctx, key, s, cfg)
	if err != nil {
		return nil, err
	}
	res := purgeResultOf(s, sel, cfg, false)
	if cfg.dryRun {
		return res, nil
	}
	defer func() { res.Meanwhile = meanwhile(s, cfg, int(res.Deleted)) }()
	for start := 0; start < len(res.IDs); start += purgeBatch {
		ids := res.IDs[start:min(start+purgeBatch, len(res.IDs))]
		n, err := i.rdb.XDel(ctx, key, ids...).Result()
		if err != nil {
			return res, fmt.Errorf("admin: purge of %q stopped after %d deleted: xdel: %w", key, res.Deleted, err)
		}
		res.Deleted += n
	}
	return res, nil
}
