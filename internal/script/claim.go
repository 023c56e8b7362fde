package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed pending_at.lua
	pendingAtSrc string
	//go:embed claim.lua
	claimSrc string
	//go:embed touch.lua
	touchSrc string

	claim = redis.NewScript(aclSrc + pendingAtSrc + claimSrc)
	touch = redis.NewScript(aclSrc + pendingAtSrc + touchSrc)
	//go:embed release.lua
	releaseSrc string
	release    = redis.NewScript(aclSrc + pendingAtSrc + releaseSrc)
)

// ClaimResult is one claim call's answer.
type ClaimResult struct {
	// Counts holds each claimed entry's delivery count (this claim included), in the
	// order of Entries.
	Counts []int
	// Deleted lists ids that were pending but no longer in the stream; Redis 7 has
	// already removed them from the pending list.
	Deleted []string
	// Entries are the claimed entries, each with its field/value pairs.
	Entries []redis.XMessage
	// Next is the cursor of the next call; "0-0" once the whole pending list was scanned.
	Next string
	// Pending is, once a scan's pass is over (Next "0-0"), how many entries the group
	// still has pending, the claimed ones included; -1 otherwise (and for listed ids).
	Pending int
}

// Claim takes up to count entries of stream's group, idle at least minIdle and with ids
// at or after start, over to consumer (XAUTOCLAIM) and reads each one's delivery count,
// in one script (see claim.lua). Entries among inflight (in flight at consumer) are not
// returned and keep their delivery counts.
func Claim(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, minIdle time.Duration, start string, count int, inflight ...string) (ClaimResult, error) {
	return runClaim(ctx, rdb, stream, group, consumer, minIdle, start, count, inflight, nil)
}

// ClaimIDs takes those of ids idle at least minIdle over to consumer (XCLAIM) and reads
// each one's delivery count, in one script (see claim.lua); ids no longer pending are
// skipped. Entries among inflight are not returned and keep their delivery counts.
// Next is "" and Deleted empty in its result.
func ClaimIDs(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, minIdle time.Duration, ids []string, inflight ...string) (ClaimResult, error) {
	if len(ids) == 0 {
		return ClaimResult{}, nil
	}
	return runClaim(ctx, rdb, stream, group, consumer, minIdle, "", len(ids), inflight, ids)
}

func runClaim(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, minIdle time.Duration, start string, count int, inflight, ids []string) (ClaimResult, error) {
	args := make([]any, 0, 6+len(inflight)+len(ids))
	args = append(args, group, consumer, minIdle.Milliseconds(), start, count, len(inflight))
	for _, id := range inflight {
		args = append(args, id)
	}
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := claim.Run(ctx, rdb, []string{stream}, args...).Slice()
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim script: %w", err)
	}
	if len(res) != 5 {
		return ClaimResult{}, fmt.Errorf("claim script: %d values returned, want 5", len(res))
	}
	out := ClaimResult{Pending: -1}
	if n, err := toInt(res[4]); err == nil {
		out.Pending = n
	}
	var ok bool
	if out.Next, ok = res[0].(string); !ok {
		return ClaimResult{}, fmt.Errorf("claim script: cursor is a %T", res[0])
	}
	entries, _ := res[1].([]any)
	counts, _ := res[2].([]any)
	if len(entries) != len(counts) {
		return ClaimResult{}, fmt.Errorf("claim script: %d entries but %d counts", len(entries), len(counts))
	}
	for i, e := range entries {
		msg, err := xmessage(e)
		if err != nil {
			return ClaimResult{}, fmt.Errorf("claim script: %w", err)
		}
		n, err := toInt(counts[i])
		if err != nil {
			return ClaimResult{}, fmt.Errorf("claim script: count of %s: %w", msg.ID, err)
		}
		out.Entries = append(out.Entries, msg)
		out.Counts = append(out.Counts, n)
	}
	deleted, _ := res[3].([]any)
	for _, d := range deleted {
		if id, ok := d.(string); ok {
			out.Deleted = append(out.Deleted, id)
		}
	}
	return out, nil
}

// Touch resets the idle time of the entries ids still pending at consumer in stream's
// group, keeping their delivery counts, in one script (see touch.lua). It returns the ids
// no longer pending at consumer.
func Touch(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, ids ...string) ([]string, error) {
	return runOnIDs(ctx, rdb, touch, "touch", stream, []any{group, consumer}, ids)
}

// ReleasedIdle is the idle time Release gives an entry: past any claim's min-idle.
const ReleasedIdle = 10 * 365 * 24 * time.Hour // Redis takes an idle reaching before 1970 as 0

// Release hands back the entries ids, delivered to consumer but never started, as if
// they had not been delivered, in one script (see release.lua): their delivery counts go
// down by one and their idle times past any min-idle, so that any consumer of the group
// claims or re-reads them without an attempt spent. It returns the ids no longer pending
// at consumer (left alone).
func Release(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, ids ...string) ([]string, error) {
	return runOnIDs(ctx, rdb, release, "release", stream, []any{group, consumer, ReleasedIdle.Milliseconds()}, ids)
}

// runOnIDs runs s, a script over entries of stream (args, then the ids), and returns
// the ids it reports no longer pending.
func runOnIDs(ctx context.Context, rdb redis.Scripter, s *redis.Script, name, stream string, args []any, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	for _, id := range ids {
		args = append(args, id)
	}
	lost, err := s.Run(ctx, rdb, []string{stream}, args...).StringSlice()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("%s script: %w", name, err)
	}
	return lost, nil
}

// xmessage reads one entry as XRANGE returns it: {id, {field, value, …}}.
func xmessage(v any) (redis.XMessage, error) {
	e, ok := v.([]any)
	if !ok || len(e) != 2 {
		return redis.XMessage{}, fmt.Errorf("entry is a %T, want {id, fields}", v)
	}
	id, ok := e[0].(string)
	if !ok {
		return redis.XMessage{}, fmt.Errorf("entry id is a %T", e[0])
	}
	fields, _ := e[1].([]any)
	values := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		values[k] = fields[i+1]
	}
	return redis.XMessage{ID: id, Values: values}, nil
}

func toInt(v any) (int, error) {
	switch v := v.(type) {
	case int64:
		return int(v), nil
	case string:
		return strconv.Atoi(v)
	default:
		return 0, fmt.Errorf("a %T, want an integer", v)
	}
}
