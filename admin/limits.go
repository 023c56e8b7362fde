package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/flow"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// The kinds of flow limit (FlowLimit.Kind), named after settle's options.
const (
	// LimitConcurrencyBy is settle.ConcurrencyBy: slots per key value.
	LimitConcurrencyBy = "concurrency-by"
	// LimitGlobalConcurrency is settle.GlobalConcurrency: slots for the whole mount.
	LimitGlobalConcurrency = "global-concurrency"
	// LimitRate is settle.RateLimit: starts per period for the whole mount.
	LimitRate = "rate"
	// LimitRateBy is settle.RateLimitBy: starts per period per key value.
	LimitRateBy = "rate-by"
)

// DefaultLimitScan is how many keys Limits examines, at most, looking for the key
// values of a per-key limit when LimitsOptions.Scan is 0.
const DefaultLimitScan = 10_000

// DefaultLimitKeys is how many key values at their limit Limits lists, at most, per
// limit when LimitsOptions.Keys is 0.
const DefaultLimitKeys = 20

// FlowLimit is one flow limit of a mount as its App declares it (Redis keeps how much
// of a limit is used, not what it is). A mount's limits are given in the order the App
// declares them: their state is named by kind and rank.
type FlowLimit struct {
	// Burst is a rate limit's LimitBurst. Defaults to 1.
	Burst int
	// Kind is LimitRate, LimitRateBy, LimitConcurrencyBy or LimitGlobalConcurrency.
	Kind string
	// N is a rate limit's starts per Per, or a concurrency limit's slots.
	N int
	// Per is a rate limit's period (unused by a concurrency limit).
	Per time.Duration
}

// keyed reports whether l applies per key value.
func (l FlowLimit) keyed() bool { return l.Kind == LimitRateBy || l.Kind == LimitConcurrencyBy }

// slots reports whether l is a concurrency limit.
func (l FlowLimit) slots() bool {
	return l.Kind == LimitConcurrencyBy || l.Kind == LimitGlobalConcurrency
}

// String names l as settle's option would: "RateLimit(50, 1s)".
func (l FlowLimit) String() string {
	switch l.Kind {
	case LimitRate:
		return fmt.Sprintf("RateLimit(%d, %s)", l.N, l.Per)
	case LimitRateBy:
		return fmt.Sprintf("RateLimitBy(key, %d, %s)", l.N, l.Per)
	case LimitConcurrencyBy:
		return fmt.Sprintf("ConcurrencyBy(key, %d)", l.N)
	case LimitGlobalConcurrency:
		return fmt.Sprintf("GlobalConcurrency(%d)", l.N)
	}
	return fmt.Sprintf("%s(%d)", l.Kind, l.N)
}

// LimitsOptions bounds Limits.
type LimitsOptions struct {
	// Keys is how many key values at their limit are listed per limit. Defaults to
	// DefaultLimitKeys.
	Keys int
	// Scan is how many keys are examined, at most, looking for a per-key limit's key
	// values (a SCAN of the server that holds them, which examines its other keys too).
	// Defaults to DefaultLimitScan.
	Scan int
}

// LimitState is one flow limit's state, read from Redis at one instant (the server's
// TIME).
type LimitState struct {
	// AtLimit: a delivery asking now would wait (for a per-key limit: of the values
	// listed in AtLimitValues, or of any value counted in KeysAtLimit).
	AtLimit bool
	// AtLimitValues are key values at their limit, up to LimitsOptions.Keys of them
	// (the others are counted in KeysAtLimit).
	AtLimitValues []LimitValue
	// InUse is a concurrency limit's slots held now (a per-key limit's: over the key
	// values found), or a rate limit's starts given beyond now (reserved: GCRA's
	// theoretical arrival time less now, over the emission interval).
	InUse int
	// Keys is how many key values of a per-key limit hold state (a value idle long
	// enough holds none); KeysAtLimit how many of them are at their limit.
	Keys, KeysAtLimit int
	// Limit is the limit as declared.
	Limit FlowLimit
	// Name is the limit's name in its state's keys ("rate", "rateby", "slots", …).
	Name string
	// Rate is a rate limit's starts a second (N over Per); 0 for a concurrency limit.
	Rate float64
	// Scanned is how many keys the scan for a per-key limit's values examined; Partial
	// reports that it stopped at LimitsOptions.Scan before it had examined every key, so
	// Keys and KeysAtLimit count only what it found.
	Partial bool
	Scanned int
	// Waiting is how many deliveries wait for this limit, over every process consuming
	// the mount, as each last reported: a process reports every second while some of its
	// deliveries wait, so the count may be that old; a process that stopped reporting (it
	// crashed) counts no longer once its report is settle.SlotLease old.
	Waiting int
}

// LimitValue is one key value of a per-key limit.
type LimitValue struct {
	// InUse is as LimitState.InUse, for this value.
	InUse int
	// Value is the key value.
	Value string
}

// Limits reads the state of the flow limits of the mount reading key (with group, a
// stream's consumer group; "" for a reliable list), declared as limits: for each, its
// rate, how much of it is in use and whether it is at its limit, how many deliveries
// wait for it (as the consuming processes last reported), and for a per-key limit how
// many values hold state and which of them are at their limit. It reads the keys the
// limits' scripts write; a per-key limit's values are found by a SCAN of at most o.Scan
// keys, never an unbounded read. How long deliveries waited is in settleotel's
// settle.flow.wait and each delivery's log line (waited_for, waited).
func (i *Inspector) Limits(ctx context.Context, key, group string, limits []FlowLimit, o LimitsOptions) ([]LimitState, error) {
	if o.Keys <= 0 {
		o.Keys = DefaultLimitKeys
	}
	if o.Scan <= 0 {
		o.Scan = DefaultLimitScan
	}
	fl := make([]flow.Limit, len(limits))
	for n, l := range limits {
		switch l.Kind {
		case LimitRate, LimitRateBy, LimitConcurrencyBy, LimitGlobalConcurrency:
		default:
			return nil, fmt.Errorf("admin: limit %d of %q: kind %q: want %s, %s, %s or %s", n+1, key, l.Kind, LimitRate, LimitRateBy, LimitConcurrencyBy, LimitGlobalConcurrency)
		}
		if l.N <= 0 || (!l.slots() && l.Per <= 0) {
			return nil, fmt.Errorf("admin: limit %d of %q: %s: n and the period must be positive", n+1, key, l)
		}
		fl[n] = flow.Limit{N: l.N}
		if !l.slots() {
			fl[n].Per = l.Per
		}
		if l.keyed() {
			fl[n].KeyFunc = func(*source.Delivery) string { return "" }
		}
	}
	now, err := i.nowMicro(ctx)
	if err != nil {
		return nil, err
	}
	waiting, err := i.limitWaiting(ctx, keys.LimitWaiting(key, group), len(limits), now/1000)
	if err != nil {
		return nil, err
	}
	out := make([]LimitState, len(limits))
	for n, name := range flow.Names(fl) {
		l := limits[n]
		st := LimitState{Limit: l, Name: name, Waiting: waiting[n]}
		if !l.slots() {
			st.Rate = float64(l.N) / l.Per.Seconds()
		}
		prefix := limitPrefix(key, group, l, name)
		if !l.keyed() {
			v, err := i.limitValue(ctx, prefix, l, now)
			if err != nil {
				return nil, err
			}
			st.InUse, st.AtLimit = v.InUse, v.atLimit
		} else if err := i.keyedLimit(ctx, prefix, l, now, o, &st); err != nil {
			return nil, err
		}
		out[n] = st
	}
	return out, nil
}

// maxWaitingFields bounds the processes' reports Limits reads (one field a process).
const maxWaitingFields = 1000

// limitWaiting sums, per limit, the waiting counts the processes reported in the hash
// key that have not expired at now (ms), reading at most maxWaitingFields of them.
func (i *Inspector) limitWaiting(ctx context.Context, key string, limits int, now int64) ([]int, error) {
	sum := make([]int, limits)
	var cursor uint64
	read := 0
	for {
		kv, next, err := i.rdb.HScan(ctx, key, cursor, "", 100).Result()
		if err != nil {
			if strings.Contains(err.Error(), "WRONGTYPE") {
				return nil, fmt.Errorf("%w: flow limits' waiting counts %q: %v", ErrWrongType, key, err)
			}
			return nil, fmt.Errorf("admin: flow limits' waiting counts %q: %w", key, err)
		}
		for f := 1; f < len(kv); f += 2 {
			exp, counts, ok := script.ParseLimitWaiting(kv[f])
			if !ok || exp <= now {
				continue
			}
			for n := range min(len(counts), limits) {
				sum[n] += counts[n]
			}
		}
		read += len(kv) / 2
		if cursor = next; cursor == 0 || read >= maxWaitingFields {
			return sum, nil
		}
	}
}

// limitPrefix is the name of l's state key less its key value (as internal/redisbase
// names it).
func limitPrefix(key, group string, l FlowLimit, name string) string {
	kind := "rate"
	if l.slots() {
		kind = "slots"
	}
	return keys.Limit(key, group, kind+":"+name, "")
}

// valueState is one state key's reading.
type valueState struct {
	LimitValue
	atLimit bool
}

// limitValue reads the state key k of limit l at now (µs).
func (i *Inspector) limitValue(ctx context.Context, k string, l FlowLimit, now int64) (valueState, error) {
	vs, err := i.limitValues(ctx, []string{k}, l, now)
	if err != nil {
		return valueState{}, err
	}
	return vs[0], nil
}

// limitValues reads the state keys ks of limit l at now (µs), in one pipeline.
func (i *Inspector) limitValues(ctx context.Context, ks []string, l FlowLimit, now int64) ([]valueState, error) {
	out := make([]valueState, len(ks))
	if len(ks) == 0 {
		return out, nil
	}
	pipe := i.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(ks))
	for n, k := range ks {
		if l.slots() {
			cmds[n] = pipe.ZCount(ctx, k, "("+strconv.FormatInt(now/1000, 10), "+inf")
		} else {
			cmds[n] = pipe.Get(ctx, k)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if strings.Contains(err.Error(), "WRONGTYPE") {
			return nil, fmt.Errorf("%w: a flow limit's state %q: %v", ErrWrongType, ks[0], err)
		}
		return nil, fmt.Errorf("admin: flow limit state %q: %w", ks[0], err)
	}
	for n, c := range cmds {
		switch c := c.(type) {
		case *redis.IntCmd:
			out[n].InUse = int(c.Val())
			out[n].atLimit = out[n].InUse >= l.N
		case *redis.StringCmd:
			tat, err := strconv.ParseInt(c.Val(), 10, 64)
			if err != nil || tat <= now {
				continue // none, or idle
			}
			interval := max((l.Per+flow.Slack(l.Per)).Microseconds()/int64(l.N), 1) // as the gate spaces starts
			ahead := tat - now
			out[n].InUse = int((ahead + interval - 1) / interval)
			out[n].atLimit = ahead > interval*int64(max(l.Burst, 1)-1)
		}
	}
	return out, nil
}

// keyedLimit fills st with the values of the per-key limit l whose state keys begin
// with prefix, found by a SCAN of at most o.Scan keys.
func (i *Inspector) keyedLimit(ctx context.Context, prefix string, l FlowLimit, now int64, o LimitsOptions, st *LimitState) error {
	scanner := redis.Cmdable(i.rdb)
	if c, ok := i.rdb.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, prefix)
		if err != nil {
			return fmt.Errorf("admin: flow limit %s: the node of %q: %w", l, prefix, err)
		}
		scanner = node
	}
	pattern := globEscape(prefix) + "*"
	var cursor uint64
	for {
		count := int64(min(1000, o.Scan-st.Scanned))
		ks, next, err := scanner.Scan(ctx, cursor, pattern, count).Result()
		if err != nil {
			return fmt.Errorf("admin: flow limit %s: scan %q: %w", l, pattern, err)
		}
		st.Scanned += int(count)
		vs, err := i.limitValues(ctx, ks, l, now)
		if err != nil {
			return err
		}
		for n, v := range vs {
			if v.InUse == 0 {
				continue // expired meanwhile, or idle
			}
			st.Keys++
			st.InUse += v.InUse
			if v.atLimit {
				st.KeysAtLimit++
				st.AtLimit = true
				if len(st.AtLimitValues) < o.Keys {
					v.Value = strings.TrimPrefix(ks[n], prefix)
					st.AtLimitValues = append(st.AtLimitValues, v.LimitValue)
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
		if st.Scanned >= o.Scan {
			st.Partial = true
			break
		}
	}
	slices.SortFunc(st.AtLimitValues, func(a, b LimitValue) int { return strings.Compare(a.Value, b.Value) })
	return nil
}

// nowMicro returns the Redis server's time in µs since the epoch.
func (i *Inspector) nowMicro(ctx context.Context) (int64, error) {
	t, err := i.now(ctx)
	if err != nil {
		return 0, err
	}
	return t.UnixMicro(), nil
}
