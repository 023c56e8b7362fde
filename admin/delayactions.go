package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// ErrMemberNotFound reports a delay set member that is not in the set.
var ErrMemberNotFound = errors.New("admin: delay set member not found")

// DelayOption configures Promote and Cancel: DryRun, Limit.
type DelayOption interface {
	applyDelay(*actionConfig)
}

func (o SelectionOption) applyDelay(c *actionConfig) { o.set(c) }

// DelayedMember is one member of a durable delay set: a retry copy parked until it is
// due.
type DelayedMember struct {
	// Due is when it is due (its score); a consumer's sweep moves it back once it is.
	Due time.Time
	// Handle names the member for a person and in a DelayFilter: the text before its
	// first line break, which is the id of the stream entry it copies (a stream's
	// member) or the random token it was parked under (a list's or a channel's).
	Handle string
	// HasPayload reports whether the copy has a payload.
	HasPayload bool
	// Headers are the copy's headers, settle's own included (nil when the member does
	// not decode).
	Headers map[string]string
	// Member is the member itself, as stored.
	Member string
	// Payload is the copy's payload bytes.
	Payload []byte
}

// DelayFilter selects members of a delay set: those Members names, or All of them.
// Exactly one of the two must be given.
type DelayFilter struct {
	// All selects every member.
	All bool
	// Members selects these members, each given by its Handle or as the whole member.
	// One the set does not hold is an error wrapping ErrMemberNotFound, and nothing is
	// changed. A handle shared by several members selects them all.
	Members []string
}

// DelayResult is what Promote or Cancel did (or, in a dry run, would do).
type DelayResult struct {
	// Done lists the members promoted (made due now) or cancelled (removed), in order of
	// due time.
	Done []DelayedMember
	// DryRun reports that nothing was changed.
	DryRun bool
	// Due lists the handles of the members Promote found due already: left as they were
	// (the next sweep moves them).
	Due []string
	// Gone lists the handles of the members that were no longer in the set when their
	// turn came (swept back, or cancelled): nothing was done to them.
	Gone []string
	// Key is the delay set.
	Key string
}

// DelayedMembers returns the members of the durable delay set key, earliest due first,
// at most limit of them (limit <= 0: all), each decoded where it decodes. A missing key
// is an empty set; a key that is not a sorted set is an error naming it.
func (i *Inspector) DelayedMembers(ctx context.Context, key string, limit int) ([]DelayedMember, error) {
	if err := i.mustBe(ctx, key, "zset", "delay set", true); err != nil {
		return nil, err
	}
	var out []DelayedMember
	for start := int64(0); ; start += scanPage {
		stop := start + scanPage - 1
		if limit > 0 {
			stop = min(stop, int64(limit)-1)
		}
		zs, err := i.rdb.ZRangeWithScores(ctx, key, start, stop).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: delay set %q: zrange %d %d: %w", key, start, stop, err)
		}
		for _, z := range zs {
			out = append(out, delayedMemberOf(z))
		}
		if int64(len(zs)) < stop-start+1 || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
	}
}

func delayedMemberOf(z redis.Z) DelayedMember {
	m, _ := z.Member.(string)
	d := DelayedMember{Due: time.UnixMilli(int64(z.Score)), Member: m}
	d.Handle, _, _ = strings.Cut(m, "\n")
	if _, payload, ok, headers, err := wire.ParseDelayMember(m); err == nil {
		d.HasPayload, d.Headers, d.Payload = ok, headers, payload
		return d
	}
	if _, value, err := wire.ParseValueDelayMember(m); err == nil {
		if payload, headers, isEnvelope, err := wire.FromEnvelope(value); err == nil && isEnvelope {
			d.HasPayload, d.Headers, d.Payload = true, headers, payload
		}
	}
	return d
}

// delaySelection returns the members of key f selects, earliest due first, at most
// the limit opts set, and the empty result of an action on them; or the refusal of f
// or opts.
func (i *Inspector) delaySelection(ctx context.Context, key string, f DelayFilter, opts []DelayOption) ([]DelayedMember, *DelayResult, error) {
	cfg := configure(opts, DelayOption.applyDelay)
	sel, err := i.delayMembersOf(ctx, key, f, cfg)
	return sel, &DelayResult{DryRun: cfg.dryRun, Key: key}, err
}

func (i *Inspector) delayMembersOf(ctx context.Context, key string, f DelayFilter, cfg actionConfig) ([]DelayedMember, error) {
	switch {
	case cfg.limit < 0:
		return nil, fmt.Errorf("admin: Limit(%d) is negative", cfg.limit)
	case f.All && len(f.Members) > 0:
		return nil, errors.New("admin: delay filter: give Members or All, not both")
	case !f.All && len(f.Members) == 0:
		return nil, errors.New("admin: delay filter: no members given (name them, or select All)")
	}
	all, err := i.DelayedMembers(ctx, key, 0)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, m := range f.Members {
		want[m] = true
	}
	found := map[string]bool{}
	var sel []DelayedMember
	for _, d := range all {
		if !f.All && !want[d.Handle] && !want[d.Member] {
			continue
		}
		found[d.Handle], found[d.Member] = true, true
		if cfg.limit == 0 || len(sel) < cfg.limit {
			sel = append(sel, d)
		}
	}
	var missing []string
	for _, m := range f.Members {
		if !found[m] {
			missing = append(missing, fmt.Sprintf("%q", m))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: delay set %q has no member %s", ErrMemberNotFound, key, strings.Join(missing, ", "))
	}
	return sel, nil
}

// promoteBatch is how many members one promote script moves.
const promoteBatch = 100

// Promote makes the members of the durable delay set key that f selects due now (the
// Redis server's TIME), so that the next sweep (a consumer of the mount sweeps before
// each read) moves them back to their stream, list or channel; what the retry copy
// holds, its attempt included, is unchanged. One Lua script per batch checks and
// rescores each member; a member due already is left as it is (DelayResult.Due) and one
// swept or cancelled meanwhile is skipped (DelayResult.Gone), so a promotion run twice
// changes nothing more. A key that is not a sorted set, a filter that names no member or
// a member the set does not hold is refused before anything changes.
func (i *Inspector) Promote(ctx context.Context, key string, f DelayFilter, opts ...DelayOption) (*DelayResult, error) {
	sel, res, err := i.delaySelection(ctx, key, f, opts)
	if err != nil {
		return nil, err
	}
	if res.DryRun {
		now, err := i.now(ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range sel {
			if d.Due.After(now) {
				res.Done = append(res.Done, d)
			} else {
				res.Due = append(res.Due, d.Handle)
			}
		}
		return res, nil
	}
	for start := 0; start < len(sel); start += promoteBatch {
		batch := sel[start:min(start+promoteBatch, len(sel))]
		members := make([]string, len(batch))
		for n, d := range batch {
			members[n] = d.Member
		}
		codes, err := script.PromoteDelayed(ctx, i.rdb, key, -1, members...)
		if err != nil {
			return res, fmt.Errorf("admin: promoting members of delay set %q: %w", key, err)
		}
		for n, c := range codes {
			switch c {
			case script.PromotionDone:
				res.Done = append(res.Done, batch[n])
			case script.PromotionDue:
				res.Due = append(res.Due, batch[n].Handle)
			default:
				res.Gone = append(res.Gone, batch[n].Handle)
			}
		}
	}
	return res, nil
}

// Cancel removes the members of the durable delay set key that f selects: those retry
// copies are never delivered. Each removal is atomic (ZREM), and a member gone already
// (swept back, or cancelled) is skipped (DelayResult.Gone), so a cancellation run twice
// removes nothing more. The selection is checked as Promote's is, before anything
// changes; with DryRun, DelayResult.Done lists what would be removed.
func (i *Inspector) Cancel(ctx context.Context, key string, f DelayFilter, opts ...DelayOption) (*DelayResult, error) {
	sel, res, err := i.delaySelection(ctx, key, f, opts)
	if err != nil {
		return nil, err
	}
	if res.DryRun {
		res.Done = sel
		return res, nil
	}
	for start := 0; start < len(sel); start += purgeBatch {
		batch := sel[start:min(start+purgeBatch, len(sel))]
		pipe := i.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for n, d := range batch {
			cmds[n] = pipe.ZRem(ctx, key, d.Member)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return res, fmt.Errorf("admin: cancelling members of delay set %q: zrem: %w", key, err)
		}
		for n, c := range cmds {
			if c.Val() == 1 {
				res.Done = append(res.Done, batch[n])
			} else {
				res.Gone = append(res.Gone, batch[n].Handle)
			}
		}
	}
	return res, nil
}

// memberScan is how many members one ZSCAN of DelayedMember asks for.
const memberScan = 1000

// DelayedMember returns the member of the durable delay set key named by handle (its
// Handle, or the whole member), decoded as DelayedMembers decodes it: the first member
// found whose handle it is. It scans the set with ZSCAN MATCH, memberScan members a
// call, so each call costs O(memberScan) whatever the set holds. A member the set does
// not hold is an error wrapping ErrMemberNotFound.
func (i *Inspector) DelayedMember(ctx context.Context, key, handle string) (*DelayedMember, error) {
	if err := i.mustBe(ctx, key, "zset", "delay set", true); err != nil {
		return nil, err
	}
	pattern := globEscape(handle) + "*"
	var cursor uint64
	for {
		kv, next, err := i.rdb.ZScan(ctx, key, cursor, pattern, memberScan).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: delay set %q: zscan: %w", key, err)
		}
		for k := 0; k+1 < len(kv); k += 2 {
			d := delayedMemberOf(redis.Z{Member: kv[k]})
			if d.Handle != handle && d.Member != handle {
				continue
			}
			score, err := i.rdb.ZScore(ctx, key, d.Member).Result()
			if errors.Is(err, redis.Nil) {
				continue // swept meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("admin: delay set %q: zscore: %w", key, err)
			}
			d.Due = time.UnixMilli(int64(score))
			return &d, nil
		}
		if cursor = next; cursor == 0 {
			return nil, fmt.Errorf("%w: delay set %q has no member %q", ErrMemberNotFound, key, handle)
		}
	}
}

// globEscape escapes the glob characters of s for a MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DelayedPage returns the members of the durable delay set key from position offset
// (0: the earliest due) on, at most limit of them (1 to MaxPendingPage), each decoded
// where it decodes: one ZRANGE, a page of a set of any size. A missing key is an empty
// set.
func (i *Inspector) DelayedPage(ctx context.Context, key string, offset, limit int64) ([]DelayedMember, error) {
	if offset < 0 || limit <= 0 || limit > MaxPendingPage {
		return nil, fmt.Errorf("admin: delay set %q: page at %d of %d: want an offset from 0 and a limit of 1 to %d", key, offset, limit, MaxPendingPage)
	}
	if err := i.mustBe(ctx, key, "zset", "delay set", true); err != nil {
		return nil, err
	}
	zs, err := i.rdb.ZRangeWithScores(ctx, key, offset, offset+limit-1).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: delay set %q: zrange %d %d: %w", key, offset, offset+limit-1, err)
	}
	out := make([]DelayedMember, len(zs))
	for k, z := range zs {
		out[k] = delayedMemberOf(z)
	}
	return out, nil
}
