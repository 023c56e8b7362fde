package admin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// ErrNotPending reports an entry that is in the stream but not pending in the consumer
// group (acknowledged already, or never delivered).
var ErrNotPending = errors.New("admin: entry not pending")

// ReasonOperator is the dead-letter reason (settle.HeaderDeadReason) of an entry
// Inspector.DeadLetterPending dead-lettered.
const ReasonOperator = "dead-lettered by an operator"

// PendingOption configures the actions on a group's pending entries and consumers
// (DeadLetterPending, ReleasePending, PruneConsumers): DryRun, and Limit where a
// selection is bounded.
type PendingOption interface {
	applyPending(*actionConfig)
}

func (o SelectionOption) applyPending(c *actionConfig) { o.set(c) }

// PendingEntry is one pending entry of a consumer group, as an action selected it.
type PendingEntry struct {
	// Consumer is the consumer it is pending at.
	Consumer string
	// Deliveries is how many times it was delivered (or claimed).
	Deliveries int64
	// ID is its id.
	ID string
	// Idle is how long it has gone without being delivered, claimed or touched.
	Idle time.Duration
}

// DeadLettered is one pending entry DeadLetterPending dead-lettered.
type DeadLettered struct {
	PendingEntry
	// DeadID is the dead letter's id in the dead-letter stream ("" in a dry run).
	DeadID string
}

// DeadLetterPendingResult is what DeadLetterPending did (or, in a dry run, would do).
type DeadLetterPendingResult struct {
	// DeadLettered lists the entries dead-lettered, in the order of the ids given.
	DeadLettered []DeadLettered
	// DryRun reports that nothing was changed.
	DryRun bool
	// Gone lists the entries that were no longer pending when their turn came (their
	// consumer settled them, or another dead-lettering took them first): nothing was
	// written for them.
	Gone []string
	// To is the dead-letter stream.
	To string
}

// DeadLetterPending dead-letters the pending entries ids of the stream key's consumer
// group now, to the dead-letter stream dest, in the order given: for each, one Lua
// script appends the dead letter (the entry's payload and headers, its retry count set
// to the attempts spent, and settle's dead-letter headers: source key, dead id the
// entry's, dead-at the server's time, reason ReasonOperator, an error naming the consumer
// that held it, its idle and its deliveries) and acknowledges the entry, so the
// consumer holding it settles nothing more (its own settlement finds it no longer
// pending). An entry no longer pending when its turn comes is skipped
// (DeadLetterPendingResult.Gone), so nothing is dead-lettered twice. The entry stays in
// the stream, as settle's own dead letters leave it.
//
// Before anything changes, the whole selection is checked, and refused with an error
// naming the problem: no ids, an id that is not <ms>-<seq>, a missing key or one that
// is not a stream, a group the stream does not have, an id not in the stream
// (ErrEntryNotFound) or not pending in the group (ErrNotPending), a dest that is key
// itself or holds another type, and on Redis Cluster a dest in another hash slot
// (ErrCrossSlot). A missing dest is made, as settle.DeadLetter makes it.
func (i *Inspector) DeadLetterPending(ctx context.Context, key, group string, ids []string, dest string, opts ...PendingOption) (*DeadLetterPendingResult, error) {
	cfg := configure(opts, PendingOption.applyPending)
	var errs []error
	switch {
	case dest == "":
		errs = append(errs, errors.New("admin: no dead-letter stream given"))
	case dest == key:
		errs = append(errs, fmt.Errorf("admin: cannot dead-letter entries of %q into the stream itself", key))
	case i.checkSlots:
		if err := keys.SameSlot(key, dest); err != nil {
			errs = append(errs, fmt.Errorf("%w: dead-lettering from %q to %q is one script and must stay in one slot: %v", ErrCrossSlot, key, dest, err))
		}
	}
	if dest != "" && dest != key {
		if err := i.mustBe(ctx, dest, "stream", "dead-letter stream", true); err != nil {
			errs = append(errs, err)
		}
	}
	sel, err := i.pendingSelection(ctx, key, group, ids, cfg)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	entries := make(map[string]redis.XMessage, len(sel))
	var missing []string
	for _, p := range sel {
		msgs, err := i.rdb.XRange(ctx, key, p.ID, p.ID).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: stream %q: entry %q: %w", key, p.ID, err)
		}
		if len(msgs) == 0 {
			missing = append(missing, p.ID)
			continue
		}
		entries[p.ID] = msgs[0]
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: entries %s are pending in group %q but no longer in the stream %q (deleted or trimmed): there is nothing to dead-letter", ErrEntryNotFound, strings.Join(missing, ", "), group, key)
	}
	res := &DeadLetterPendingResult{DryRun: cfg.dryRun, To: dest}
	now, err := i.now(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range sel {
		if cfg.dryRun {
			res.DeadLettered = append(res.DeadLettered, DeadLettered{PendingEntry: p})
			continue
		}
		deadID, written, err := script.DeadLetterPending(ctx, i.rdb, key, dest, group, p.ID, deadLetterValues(key, p, entries[p.ID], now))
		if err != nil {
			return res, fmt.Errorf("admin: dead-lettering %s of %q to %q: %w", p.ID, key, dest, err)
		}
		if !written {
			res.Gone = append(res.Gone, p.ID)
			continue
		}
		res.DeadLettered = append(res.DeadLettered, DeadLettered{PendingEntry: p, DeadID: deadID})
	}
	return res, nil
}

// deadLetterValues is the dead letter of pending entry p (msg, read from key), as
// settle writes one: the entry's payload and headers, the retry count set to the
// attempts spent, and the dead-letter headers, dead-lettered at now (the server's
// clock) with reason ReasonOperator and an error saying who held it.
func deadLetterValues(key string, p PendingEntry, msg redis.XMessage, now time.Time) []any {
	payload, ok, headers := wire.FromStream(msg.Values)
	if headers == nil {
		headers = map[string]string{}
	}
	headers[settle.HeaderRetryCount] = strconv.FormatInt(int64(retryCount(headers))+p.Deliveries, 10)
	headers[settle.HeaderDeadSource] = key
	headers[settle.HeaderDeadID] = p.ID
	headers[settle.HeaderDeadReason] = ReasonOperator
	headers[settle.HeaderDeadAt] = now.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	headers[settle.HeaderDeadError] = fmt.Sprintf("%s: held by consumer %s, idle %s, delivered %d times", ReasonOperator, p.Consumer, p.Idle.Round(time.Second), p.Deliveries)
	if ok && payload == nil {
		payload = []byte{}
	}
	return wire.StreamValues(payload, headers)
}

// retryCount reads the retry-count header as settle does: missing or garbled is 0.
func retryCount(headers map[string]string) int {
	n, err := strconv.Atoi(strings.TrimSpace(headers[settle.HeaderRetryCount]))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ReleaseResult is what ReleasePending did (or, in a dry run, would do).
type ReleaseResult struct {
	// Already lists the entries released before and not delivered, claimed or touched
	// since: left as they were.
	Already []string
	// DryRun reports that nothing was changed.
	DryRun bool
	// Gone lists the entries that were no longer pending at their consumer when their
	// turn came (settled, or claimed by another consumer): left alone.
	Gone []string
	// Released lists the entries released, as they were before.
	Released []PendingEntry
}

// ReleasePending releases the pending entries ids of the stream key's consumer group
// to the group, as settle releases the deliveries a stopping consumer never started:
// each stays pending at its consumer with one delivery taken off its count and an idle
// time past any claim's min-idle, so that the next reclaim of a Stream mount (or a
// ClaimingStream) of the group takes it at once, without an attempt spent. One Lua script
// per consumer checks and resets its entries; an entry released already and not
// delivered since is left alone (ReleaseResult.Already), so a release run twice takes
// one delivery off, not two. A consumer that is alive and still handling the entry
// resets its idle with its next heartbeat: release the entries of a stuck or dead
// consumer.
//
// The selection is checked first, as DeadLetterPending's is (no ids, an id that does
// not parse, a missing key, a key that is not a stream, a missing group, an id not in
// the stream or not pending), and refused before anything changes.
func (i *Inspector) ReleasePending(ctx context.Context, key, group string, ids []string, opts ...PendingOption) (*ReleaseResult, error) {
	cfg := configure(opts, PendingOption.applyPending)
	sel, err := i.pendingSelection(ctx, key, group, ids, cfg)
	if err != nil {
		return nil, err
	}
	res := &ReleaseResult{DryRun: cfg.dryRun}
	if cfg.dryRun {
		for _, p := range sel {
			if p.Idle >= script.ReleasedIdle {
				res.Already = append(res.Already, p.ID)
				continue
			}
			res.Released = append(res.Released, p)
		}
		return res, nil
	}
	byID := make(map[string]PendingEntry, len(sel))
	var consumers []string
	byConsumer := map[string][]string{}
	for _, p := range sel {
		byID[p.ID] = p
		if _, ok := byConsumer[p.Consumer]; !ok {
			consumers = append(consumers, p.Consumer)
		}
		byConsumer[p.Consumer] = append(byConsumer[p.Consumer], p.ID)
	}
	for _, c := range consumers {
		r, err := script.ReleasePending(ctx, i.rdb, key, group, c, byConsumer[c]...)
		if err != nil {
			return res, fmt.Errorf("admin: releasing entries of consumer %q of %q group %q: %w", c, key, group, err)
		}
		for _, id := range r.Released {
			res.Released = append(res.Released, byID[id])
		}
		res.Already = append(res.Already, r.Already...)
		res.Gone = append(res.Gone, r.Lost...)
	}
	return res, nil
}

// PruneResult is what PruneConsumers removed (or, in a dry run, would remove).
type PruneResult struct {
	// DryRun reports that nothing was removed.
	DryRun bool
	// Pruned names the consumers removed.
	Pruned []string
}

// PruneConsumers removes from the stream key's consumer group the consumers that hold
// no pending entry (names left by processes that stopped), in one Lua script that reads
// each consumer's pending count and removes it in the same step (XGROUP DELCONSUMER),
// so no entry pending at a removed consumer is lost. A consumer that reads again is
// made again by its read. Run twice, the second run removes nothing (or only consumers
// that came and went since). A missing key, a key that is not a stream or a missing
// group is refused with an error naming it; Limit does not apply.
func (i *Inspector) PruneConsumers(ctx context.Context, key, group string, opts ...PendingOption) (*PruneResult, error) {
	cfg := configure(opts, PendingOption.applyPending)
	if cfg.limit != 0 {
		return nil, fmt.Errorf("admin: Limit(%d) does not apply to PruneConsumers: every consumer holding nothing is removed", cfg.limit)
	}
	if err := i.mustHaveGroup(ctx, key, group); err != nil {
		return nil, err
	}
	res := &PruneResult{DryRun: cfg.dryRun}
	if cfg.dryRun {
		consumers, err := i.rdb.XInfoConsumers(ctx, key, group).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: stream %q group %q: xinfo consumers: %w", key, group, err)
		}
		for _, c := range consumers {
			if c.Pending == 0 && c.Idle >= time.Millisecond {
				res.Pruned = append(res.Pruned, c.Name)
			}
		}
		return res, nil
	}
	// No consumer is named "" (XREADGROUP refuses it), so none is spared as the caller;
	// a consumer idle under 1 ms has just read and is spared.
	names, err := script.PruneConsumers(ctx, i.rdb, key, group, "", time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("admin: pruning consumers of %q group %q: %w", key, group, err)
	}
	res.Pruned = names
	return res, nil
}

// configure returns the configuration opts set (a nil option is skipped).
func configure[O any](opts []O, apply func(O, *actionConfig)) actionConfig {
	var cfg actionConfig
	for _, o := range opts {
		if any(o) != nil {
			apply(o, &cfg)
		}
	}
	return cfg
}

// entryIDRe is a full stream entry id.
var entryIDRe = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// mustHaveGroup refuses a key that is missing or not a stream, or a stream without the
// consumer group.
func (i *Inspector) mustHaveGroup(ctx context.Context, key, group string) error {
	_, err := i.groupInfo(ctx, key, group)
	return err
}

// groupInfo returns the consumer group of the stream key, refusing a key that is
// missing or not a stream, or a stream without the group.
func (i *Inspector) groupInfo(ctx context.Context, key, group string) (redis.XInfoGroup, error) {
	if err := i.mustBe(ctx, key, "stream", "stream", false); err != nil {
		return redis.XInfoGroup{}, err
	}
	groups, err := i.rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return redis.XInfoGroup{}, fmt.Errorf("admin: stream %q: xinfo groups: %w", key, err)
	}
	for _, g := range groups {
		if g.Name == group {
			return g, nil
		}
	}
	return redis.XInfoGroup{}, fmt.Errorf("%w: stream %q has no group %q", ErrGroupNotFound, key, group)
}

// pendingSelection returns the pending entries ids (each once, in order, at most
// cfg.limit) of key's group, or every refusal of them joined.
func (i *Inspector) pendingSelection(ctx context.Context, key, group string, ids []string, cfg actionConfig) ([]PendingEntry, error) {
	if cfg.limit < 0 {
		return nil, fmt.Errorf("admin: Limit(%d) is negative", cfg.limit)
	}
	if len(ids) == 0 {
		return nil, errors.New("admin: no entry ids given")
	}
	var bad []string
	seen := map[string]bool{}
	var uniq []string
	for _, id := range ids {
		if !entryIDRe.MatchString(id) {
			bad = append(bad, fmt.Sprintf("%q", id))
		}
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("admin: entry ids %s do not parse: give them whole, <ms>-<seq> (as pending ls shows them)", strings.Join(bad, ", "))
	}
	if err := i.mustHaveGroup(ctx, key, group); err != nil {
		return nil, err
	}
	if cfg.limit > 0 && len(uniq) > cfg.limit {
		uniq = uniq[:cfg.limit]
	}
	var sel []PendingEntry
	var notFound, notPending []string
	for _, id := range uniq {
		ext, err := i.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: id, End: id, Count: 1}).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: stream %q group %q: xpending %s: %w", key, group, id, err)
		}
		if len(ext) == 1 {
			sel = append(sel, PendingEntry{Consumer: ext[0].Consumer, Deliveries: ext[0].RetryCount, ID: id, Idle: ext[0].Idle})
			continue
		}
		msgs, err := i.rdb.XRange(ctx, key, id, id).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: stream %q: entry %q: %w", key, id, err)
		}
		if len(msgs) == 0 {
			notFound = append(notFound, id)
		} else {
			notPending = append(notPending, id)
		}
	}
	var errs []error
	if len(notFound) > 0 {
		errs = append(errs, fmt.Errorf("%w: stream %q has no entry %s", ErrEntryNotFound, key, strings.Join(notFound, ", ")))
	}
	if len(notPending) > 0 {
		errs = append(errs, fmt.Errorf("%w: entries %s of stream %q are not pending in group %q (acknowledged, or never delivered)", ErrNotPending, strings.Join(notPending, ", "), key, group))
	}
	return sel, errors.Join(errs...)
}

// PendingFilter selects pending entries for Inspector.PendingEntries.
type PendingFilter struct {
	// After is a page's cursor: the entries after this id. Defaults to "": from the first.
	After string
	// Consumer selects the entries pending at this consumer. Defaults to "": any.
	Consumer string
}

// MaxPendingPage bounds one page of Inspector.PendingEntries.
const MaxPendingPage = 1000

// PendingEntries returns one page of the pending entries of the stream key's group
// group that f selects, oldest id first, at most limit (1 to MaxPendingPage; 0:
// MaxPendingPage): each with the consumer holding it, its idle time and its deliveries
// (one XPENDING … COUNT). The next page starts after the last id returned.
func (i *Inspector) PendingEntries(ctx context.Context, key, group string, f PendingFilter, limit int) ([]PendingEntry, error) {
	if limit <= 0 || limit > MaxPendingPage {
		limit = MaxPendingPage
	}
	if err := i.mustHaveGroup(ctx, key, group); err != nil {
		return nil, err
	}
	start := "-"
	if f.After != "" {
		// The id after f.After ("(" + id, exclusive, is Redis 6.2's; this works on all).
		ms, seq, ok := strings.Cut(f.After, "-")
		n, err := strconv.ParseUint(seq, 10, 64)
		if !ok || err != nil || !entryIDRe.MatchString(f.After) {
			return nil, fmt.Errorf("admin: After %q is not an entry id (<ms>-<seq>)", f.After)
		}
		start = ms + "-" + strconv.FormatUint(n+1, 10)
	}
	ext, err := i.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: start, End: "+", Count: int64(limit), Consumer: f.Consumer}).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q group %q: xpending: %w", key, group, err)
	}
	out := make([]PendingEntry, len(ext))
	for k, e := range ext {
		out[k] = PendingEntry{Consumer: e.Consumer, Deliveries: e.RetryCount, ID: e.ID, Idle: e.Idle}
	}
	return out, nil
}

// PendingIDs returns the ids of every entry pending in the stream key's group group
// (at consumer only, when it is not ""), oldest first, read page by page with
// PendingEntries: the set a "release a consumer's" or "dead-letter all" confirmation
// names and then acts on.
func (i *Inspector) PendingIDs(ctx context.Context, key, group, consumer string) ([]string, error) {
	var ids []string
	f := PendingFilter{Consumer: consumer}
	for {
		page, err := i.PendingEntries(ctx, key, group, f, MaxPendingPage)
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			ids = append(ids, p.ID)
		}
		if len(page) < MaxPendingPage {
			return ids, nil
		}
		f.After = page[len(page)-1].ID
	}
}

// Pending returns the pending entry id of the stream key's group group: the consumer
// holding it, its idle time and its deliveries (one XPENDING). An entry that is not
// pending there is an error wrapping ErrNotPending; a missing key or group is refused
// as PendingEntries refuses it.
func (i *Inspector) Pending(ctx context.Context, key, group, id string) (*PendingEntry, error) {
	if !entryIDRe.MatchString(id) {
		return nil, fmt.Errorf("admin: %q is not an entry id (<ms>-<seq>)", id)
	}
	if err := i.mustHaveGroup(ctx, key, group); err != nil {
		return nil, err
	}
	ext, err := i.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q group %q: xpending %s: %w", key, group, id, err)
	}
	if len(ext) == 0 {
		return nil, fmt.Errorf("%w: entry %s of stream %q is not pending in group %q", ErrNotPending, id, key, group)
	}
	return &PendingEntry{Consumer: ext[0].Consumer, Deliveries: ext[0].RetryCount, ID: id, Idle: ext[0].Idle}, nil
}
