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
	//go:embed delay_publish.lua
	delayPublishSrc string
	//go:embed trim.lua
	trimSrc string

	delayPublish = redis.NewScript(aclSrc + nowSrc + expirySrc + delayPublishSrc)
	trim         = redis.NewScript(nowSrc + trimSrc)
)

// DelayPublish adds member to the delay set, due delay after the server's TIME, or at
// at (ms since the epoch) when at >= 0, in one script; the set then lives at least ttl (ttl 0: for ever), its expiry never brought closer (expiry.lua)
// after it, and a due time ttl or more ahead is refused. dest, when not empty, is the
// stream or list (destType: "stream" or "list") the set's sweep delivers into, whose
// type is checked. It returns the due time in ms.
func DelayPublish(ctx context.Context, rdb redis.Scripter, set, dest, destType, member string, delay time.Duration, at int64, ttl time.Duration) (int64, error) {
	ks := []string{set}
	if dest != "" {
		ks = append(ks, dest)
	}
	atArg := ""
	if at >= 0 {
		atArg = strconv.FormatInt(at, 10)
	}
	due, err := delayPublish.Run(ctx, rdb, ks, member, delay.Milliseconds(), atArg, ttlArg(ttl), destType).Int64()
	if err != nil {
		return 0, fmt.Errorf("delay publish script: %w", err)
	}
	return due, nil
}

// TrimResult is one trim call's answer.
type TrimResult struct {
	// Trimmed counts the entries removed.
	Trimmed int64
	// Bound is the id below which entries were removed ("" when none were).
	Bound string
}

// Trim removes the entries of stream below the least of every group's oldest pending
// (or last-delivered) id and now - keep, in one script; now is the time in ms since the
// epoch, or -1 for the server's TIME. A stream without a group is left as it is.
func Trim(ctx context.Context, rdb redis.Scripter, stream string, keep time.Duration, now int64) (TrimResult, error) {
	vals, err := trim.Run(ctx, rdb, []string{stream}, nowArg(now), keep.Milliseconds()).Slice()
	if err != nil {
		return TrimResult{}, fmt.Errorf("trim script: %w", err)
	}
	if len(vals) != 2 {
		return TrimResult{}, fmt.Errorf("trim script: %d values returned, want 2", len(vals))
	}
	n, _ := vals[0].(int64)
	bound, _ := vals[1].(string)
	return TrimResult{Trimmed: n, Bound: bound}, nil
}
