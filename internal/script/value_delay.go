package script

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed value_park.lua
	valueParkSrc string
	//go:embed list_sweep.lua
	listSweepSrc string
	//go:embed channel_sweep.lua
	channelSweepSrc string

	valuePark    = redis.NewScript(aclSrc + nowSrc + expirySrc + valueParkSrc)
	listSweep    = redis.NewScript(aclSrc + nowSrc + nextDueSrc + listSweepSrc)
	channelSweep = redis.NewScript(aclSrc + nowSrc + nextDueSrc + channelSweepSrc)
)

// ParkValue adds member (internal/wire.ValueDelayMember) to the delay set scored by now
// + delay (ms), in one script; the set then lives at least ttl after this park (ttl 0: for
// ever), its expiry never brought closer (expiry.lua). now is
// the time in ms since the epoch, or -1 for the server's TIME.
//
// With processing not empty (a reliable list), item is first removed from that
// processing list, and the member is added only if it was there: parked is false, and
// nothing was written, when the item was gone. It returns the due time in ms.
func ParkValue(ctx context.Context, rdb redis.Scripter, set, processing, item, member string, delay, ttl time.Duration, now int64) (due int64, parked bool, err error) {
	ttlMs := ttl.Milliseconds()
	if ttl > 0 && ttlMs == 0 {
		ttlMs = 1
	}
	ks := []string{set}
	args := []any{member, delay.Milliseconds(), ttlMs, nowArg(now)}
	if processing != "" {
		ks = append(ks, processing)
		args = append(args, item)
	}
	due, err = valuePark.Run(ctx, rdb, ks, args...).Int64()
	if err != nil {
		return 0, false, fmt.Errorf("park script: %w", err)
	}
	if due < 0 {
		return 0, false, nil
	}
	return due, true, nil
}

// SweepList moves up to limit members of the delay set due at now (ms since the epoch,
// or -1 for the server's TIME) to the tail of list (RPUSH), in one script.
func SweepList(ctx context.Context, rdb redis.Scripter, set, list string, now int64, limit int) (SweepResult, error) {
	vals, err := listSweep.Run(ctx, rdb, []string{set, list}, nowArg(now), limit).Int64Slice()
	if err != nil {
		return SweepResult{}, fmt.Errorf("list sweep script: %w", err)
	}
	return sweepResult(vals, 3)
}

// SweepChannel publishes up to limit members of the delay set due at now (ms since the
// epoch, or -1 for the server's TIME) to channel and removes them, in one script.
func SweepChannel(ctx context.Context, rdb redis.Scripter, set, channel string, now int64, limit int) (SweepResult, error) {
	vals, err := channelSweep.Run(ctx, rdb, []string{set}, nowArg(now), limit, channel).Int64Slice()
	if err != nil {
		return SweepResult{}, fmt.Errorf("channel sweep script: %w", err)
	}
	return sweepResult(vals, 4)
}

// sweepResult reads a sweep script's {moved, next, now[, unheard]} answer.
func sweepResult(vals []int64, want int) (SweepResult, error) {
	if len(vals) != want {
		return SweepResult{}, fmt.Errorf("sweep script: %d values returned, want %d", len(vals), want)
	}
	r := SweepResult{Moved: int(vals[0]), Next: vals[1], Now: vals[2]}
	if want > 3 {
		r.Unheard = int(vals[3])
	}
	return r, nil
}
