package script

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	//go:embed limit_waiting.lua
	limitWaitingSrc string

	limitTake    = redis.NewScript(limitTakeSrc)
	limitRenew   = redis.NewScript(nowSrc + limitRenewSrc)
	limitRelease = redis.NewScript(limitReleaseSrc)
	limitWaiting = redis.NewScript(nowSrc + limitWaitingSrc)
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

// Take is LimitTake's answer.
type Take struct {
	// Wait is how long the delivery waits: 0, it starts now; else it starts then
	// (Reserved) or asks again then.
	Wait time.Duration
	// Which is the index of the limit that asks the wait (-1: none).
	Which int
	// Reserved: the delivery took its place (its rate limits moved on, its slots
	// leased) and starts once Wait has passed, without asking again.
	Reserved bool
}

// LimitTake lets a delivery start under limits, its slots held by token, now or (within
// horizon) at a time it reserves, or says how long it must wait (see limit_take.lua).
// now is the time in ms since the epoch, or -1 for the server's TIME (in µs).
func LimitTake(ctx context.Context, rdb redis.Scripter, limits []Limit, token string, horizon time.Duration, now int64) (Take, error) {
	ks := make([]string, len(limits))
	args := make([]any, 0, 3+4*len(limits))
	args = append(args, nowArg(now), token, horizon.Microseconds())
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
		return Take{}, fmt.Errorf("limit take script: %w", err)
	}
	if r, ok := res.([]any); ok && len(r) == 3 {
		us, _ := r[0].(int64)
		i, _ := r[1].(int64)
		reserved, _ := r[2].(int64)
		return Take{Wait: time.Duration(us) * time.Microsecond, Which: int(i) - 1, Reserved: reserved == 1}, nil
	}
	return Take{Which: -1}, nil
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

// LimitWaiting records under process, in the hash key, how many deliveries it has
// waiting for each of a mount's limits (counts, in the order declared; all zero removes
// its field), held for ttl without another report, and sweeps the fields of processes
// that stopped reporting (see limit_waiting.lua). now is as LimitTake's. It returns how
// many processes' counts are held.
func LimitWaiting(ctx context.Context, rdb redis.Scripter, key, process string, counts []int, ttl time.Duration, now int64) (int, error) {
	enc := ""
	if slices.ContainsFunc(counts, func(n int) bool { return n > 0 }) {
		parts := make([]string, len(counts))
		for i, n := range counts {
			parts[i] = strconv.Itoa(n)
		}
		enc = strings.Join(parts, ",")
	}
	n, err := limitWaiting.Run(ctx, rdb, []string{key}, nowArg(now), process, enc, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return 0, fmt.Errorf("limit waiting script: %w", err)
	}
	return n, nil
}

// ParseLimitWaiting reads one process's field of a LimitWaiting hash: when its counts
// expire (ms since the epoch) and the counts; ok is false for a field that does not
// parse.
func ParseLimitWaiting(v string) (expires int64, counts []int, ok bool) {
	exp, rest, found := strings.Cut(v, ":")
	if !found {
		return 0, nil, false
	}
	expires, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return 0, nil, false
	}
	for _, f := range strings.Split(rest, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return 0, nil, false
		}
		counts = append(counts, n)
	}
	return expires, counts, true
}
