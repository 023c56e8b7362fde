package script

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StreamPark is one park of a Parks batch: the retry copy (internal/wire.DelayMember) of
// entry ID, due Delay from now.
type StreamPark struct {
	Delay  time.Duration
	ID     string
	Member string
}

// Parks runs Park for each of ps, all into the delay set set from stream, in one
// pipeline: each park its own script call, atomic on its own and answered on its own,
// sharing one round trip. It returns each park's error, in order.
func Parks(ctx context.Context, rdb redis.UniversalClient, set, stream, group, consumer string, ttl time.Duration, now int64, ps []StreamPark) []error {
	calls := make([]call, len(ps))
	for i, p := range ps {
		calls[i] = call{keys: []string{set, stream}, args: []any{p.Member, p.Delay.Milliseconds(), ttlArg(ttl), group, p.ID, nowArg(now), consumer}}
	}
	errs := make([]error, len(ps))
	for i, cmd := range runEach(ctx, rdb, park, calls) {
		if err := cmd.Err(); err != nil {
			errs[i] = fmt.Errorf("park script: %w", notOwner(err))
		}
	}
	return errs
}

// ValuePark is one park of a ValueParks batch: the retry copy (internal/wire.
// ValueDelayMember) of a list item or channel message, due Delay from now; Item is the
// original in the processing list (reliable lists only).
type ValuePark struct {
	Delay  time.Duration
	Item   string
	Member string
}

// ValueParks runs ParkValue for each of ps, all into the delay set set (taking each item
// out of processing when it is not empty), in one pipeline: each park its own script
// call, atomic on its own and answered on its own. It returns each park's error, in
// order: ErrItemGone for an item no longer in the processing list (nothing written).
func ValueParks(ctx context.Context, rdb redis.UniversalClient, set, processing string, ttl time.Duration, now int64, ps []ValuePark) []error {
	calls := make([]call, len(ps))
	for i, p := range ps {
		c := call{keys: []string{set}, args: []any{p.Member, p.Delay.Milliseconds(), ttlArg(ttl), nowArg(now)}}
		if processing != "" {
			c.keys = append(c.keys, processing)
			c.args = append(c.args, p.Item)
		}
		calls[i] = c
	}
	errs := make([]error, len(ps))
	for i, cmd := range runEach(ctx, rdb, valuePark, calls) {
		due, err := cmd.(*redis.Cmd).Int64()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("park script: %w", err)
		case due < 0:
			errs[i] = ErrItemGone
		}
	}
	return errs
}

// call is one script call of a runEach batch.
type call struct {
	args []any
	keys []string
}

// runEach runs s once per call. One call goes as s.Run does it; more share one pipeline
// of EVALSHA (each still its own script, atomic on its own, with its own result), and
// those that met NOSCRIPT are run again through s.Run, which loads the script.
func runEach(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, calls []call) []redis.Cmder {
	cmds := make([]redis.Cmder, len(calls))
	if len(calls) == 1 {
		cmds[0] = s.Run(ctx, rdb, calls[0].keys, calls[0].args...)
		return cmds
	}
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each call's own error is on its command
	for i, c := range calls {
		if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			cmds[i] = s.Run(ctx, rdb, c.keys, c.args...)
		}
	}
	return cmds
}

// ttlArg is a delay set's TTL in ms (0: no expiry); a positive TTL under a millisecond
// is one.
func ttlArg(ttl time.Duration) int64 {
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	return ms
}
