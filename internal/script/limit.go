package script

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The flow limits' scripts (RateLimit, RateLimitBy, ConcurrencyBy): their state lives
// in keys beside the source, in its hash slot, named by internal/keys.
var (
	//go:embed limit_take.lua
	limitTakeSrc string
	//go:embed limit_renew.lua
	limitRenewSrc string
	//go:embed limit_release.lua
	limitReleaseSrc string

	limitTake    = redis.NewScript(nowSrc + limitTakeSrc)
	limitRenew   = redis.NewScript(nowSrc + limitRenewSrc)
	limitRelease = redis.NewScript(limitReleaseSrc)
)

// Limit is one limit a delivery must pass, with the key its state lives in.
type Limit struct {
	// Key is the limit's state: a rate limit's arrival time, a concurrency limit's leases.
	Key string
	// Slots, when positive, makes it a concurrency limit of that many slots, each leased
	// for Lease; else it is a rate limit of one start per Interval with Burst starts at
	// once.
	Slots int
	// Lease is how long a slot is held without a renewal.
	Lease time.Duration
	// Interval is a rate limit's emission interval (its period over its count).
	Interval time.Duration
	// Burst is how many starts a rate limit lets through at once after an idle time (at
	// least 1).
	Burst int
}

// LimitTake lets a delivery start under limits, its slots held by token, or returns
// how long it must wait and the index of the limit that asks it (see limit_take.lua).
// now is the time in ms since the epoch, or -1 for the server's TIME.
func LimitTake(ctx context.Context, rdb redis.Scripter, limits []Limit, token string, now int64) (wait time.Duration, which int, err error) {
	ks := make([]string, len(limits))
	args := make([]any, 0, 2+4*len(limits))
	args = append(args, nowArg(now), token)
	for i, l := range limits {
		ks[i] = l.Key
		if l.Slots > 0 {
			args = append(args, "slots", l.Slots, max(l.Lease.Milliseconds(), 1), 0)
		} else {
			us := max(l.Interval.Microseconds(), 1)
			args = append(args, "rate", us, us*int64(max(l.Burst, 1)-1), 0)
		}
	}
	res, err := limitTake.Run(ctx, rdb, ks, args...).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("limit take script: %w", err)
	}
	if pair, ok := res.([]any); ok && len(pair) == 2 {
		ms, _ := pair[0].(int64)
		i, _ := pair[1].(int64)
		return time.Duration(ms) * time.Millisecond, int(i) - 1, nil
	}
	return 0, -1, nil
}

// LimitRenew extends the leases of the slots (keys[i] held by tokens[i]) by lease from
// now, and returns the indexes of those whose lease had ended: lost (see
// limit_renew.lua). now is as LimitTake's.
func LimitRenew(ctx context.Context, rdb redis.Scripter, keys, tokens []string, lease time.Duration, now int64) ([]int, error) {
	args := make([]any, 0, 2+len(tokens))
	args = append(args, nowArg(now), max(lease.Milliseconds(), 1))
	for _, t := range tokens {
		args = append(args, t)
	}
	res, err := limitRenew.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("limit renew script: %w", err)
	}
	lost := make([]int, len(res))
	for i, r := range res {
		lost[i] = int(r) - 1
	}
	return lost, nil
}

// LimitRelease frees the slots keys[i] held by tokens[i], each only if that token still
// holds it, and returns how many were freed (see limit_release.lua).
func LimitRelease(ctx context.Context, rdb redis.Scripter, keys, tokens []string) (int, error) {
	args := make([]any, len(tokens))
	for i, t := range tokens {
		args[i] = t
	}
	n, err := limitRelease.Run(ctx, rdb, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("limit release script: %w", err)
	}
	return n, nil
}
