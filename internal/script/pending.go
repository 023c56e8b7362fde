package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The operator's scripts over a group's pending entries and a delay set's members (see
// settle/admin).
var (
	//go:embed pending_dead.lua
	pendingDeadSrc string
	//go:embed pending_release.lua
	pendingReleaseSrc string
	//go:embed delay_promote.lua
	delayPromoteSrc string

	pendingDead    = redis.NewScript(aclSrc + pendingDeadSrc)
	pendingRelease = redis.NewScript(aclSrc + pendingAtSrc + pendingReleaseSrc)
	delayPromote   = redis.NewScript(aclSrc + nowSrc + delayPromoteSrc)
)

// DeadLetterPending appends a dead letter (values: field/value pairs, encoded by the
// caller) to the stream dlq and acknowledges entry id of stream in group, in one script
// (see pending_dead.lua). It returns the dead letter's id, or written false when id is
// no longer pending in the group: nothing was written.
func DeadLetterPending(ctx context.Context, rdb redis.Scripter, stream, dlq, group, id string, values []any) (deadID string, written bool, err error) {
	args := make([]any, 0, 2+len(values))
	args = append(args, group, id)
	args = append(args, values...)
	deadID, err = pendingDead.Run(ctx, rdb, []string{stream, dlq}, args...).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("pending dead script: %w", err)
	}
	return deadID, true, nil
}

// ReleaseResult is what ReleasePending did with each id.
type ReleaseResult struct {
	// Already lists the ids released before and not delivered, claimed or touched since:
	// left alone.
	Already []string
	// Lost lists the ids no longer pending at the consumer: left alone.
	Lost []string
	// Released lists the ids released now.
	Released []string
}

// ReleasePending releases the entries ids pending at consumer in stream's group to the
// group, as Release does (delivery count down by one, idle ReleasedIdle), in one script
// (see pending_release.lua); an entry already released is left alone, so a release run
// twice takes one delivery off, not two.
func ReleasePending(ctx context.Context, rdb redis.Scripter, stream, group, consumer string, ids ...string) (ReleaseResult, error) {
	if len(ids) == 0 {
		return ReleaseResult{}, nil
	}
	args := make([]any, 0, 3+len(ids))
	args = append(args, group, consumer, ReleasedIdle.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := pendingRelease.Run(ctx, rdb, []string{stream}, args...).Slice()
	if err != nil {
		return ReleaseResult{}, fmt.Errorf("pending release script: %w", err)
	}
	if len(res) != 3 {
		return ReleaseResult{}, fmt.Errorf("pending release script: %d values returned, want 3", len(res))
	}
	lists := make([][]string, 3)
	for i, r := range res {
		vs, _ := r.([]any)
		for _, v := range vs {
			if s, ok := v.(string); ok {
				lists[i] = append(lists[i], s)
			}
		}
	}
	return ReleaseResult{Released: lists[0], Already: lists[1], Lost: lists[2]}, nil
}

// Promotion is what PromoteDelayed did with one member.
type Promotion int

// What PromoteDelayed did with a member.
const (
	// PromotionGone: the member is not in the set (swept or cancelled already).
	PromotionGone Promotion = -1
	// PromotionDue: the member was due already and was left as it was.
	PromotionDue Promotion = 0
	// PromotionDone: the member was made due now.
	PromotionDone Promotion = 1
)

// PromoteDelayed makes the members of the delay set that are not due yet due at now (ms
// since the epoch, or -1 for the server's TIME), in one script (see delay_promote.lua),
// and says what it did with each, in order.
func PromoteDelayed(ctx context.Context, rdb redis.Scripter, set string, now int64, members ...string) ([]Promotion, error) {
	if len(members) == 0 {
		return nil, nil
	}
	args := make([]any, 0, 1+len(members))
	args = append(args, nowArg(now))
	for _, m := range members {
		args = append(args, m)
	}
	codes, err := delayPromote.Run(ctx, rdb, []string{set}, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("delay promote script: %w", err)
	}
	if len(codes) != len(members) {
		return nil, fmt.Errorf("delay promote script: %d codes returned for %d members", len(codes), len(members))
	}
	out := make([]Promotion, len(codes))
	for i, c := range codes {
		out[i] = Promotion(c)
	}
	return out, nil
}
