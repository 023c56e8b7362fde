package admin

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// DelaySetInfo is a durable delay set (delayed.DurableZset), as Inspector.DelaySet
// sees it.
type DelaySetInfo struct {
	// Key is the sorted set's key.
	Key string
	// NextDue is the earliest due time in the set (in the past when members are
	// overdue); zero when the set is empty.
	NextDue time.Time
	// Now is the Redis server's time the figures were taken at.
	Now time.Time
	// OldestOverdue is how long ago the earliest overdue member came due; 0 when none is.
	OldestOverdue time.Duration
	// Overdue is how many members are due and not yet swept back: a consumer sweeps them
	// before each read, so a count that stays up means no consumer is reading.
	Overdue int64
	// Size is how many delayed messages the set holds.
	Size int64
}

// DelaySet returns the durable delay set key: its size, its next due time, and how many
// of its members are overdue (due at the Redis server's TIME) and since when. A missing
// key is an empty set (Redis deletes a sorted set once it is empty); a key that is not a
// sorted set is an error naming it.
func (i *Inspector) DelaySet(ctx context.Context, key string) (*DelaySetInfo, error) {
	if err := i.mustBe(ctx, key, "zset", "delay set", true); err != nil {
		return nil, err
	}
	now, err := i.now(ctx)
	if err != nil {
		return nil, err
	}
	info := &DelaySetInfo{Key: key, Now: now}
	if info.Size, err = i.rdb.ZCard(ctx, key).Result(); err != nil {
		return nil, fmt.Errorf("admin: delay set %q: zcard: %w", key, err)
	}
	first, err := i.rdb.ZRangeWithScores(ctx, key, 0, 0).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: delay set %q: zrange: %w", key, err)
	}
	if len(first) == 0 {
		return info, nil
	}
	info.NextDue = time.UnixMilli(int64(first[0].Score))
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	if info.Overdue, err = i.rdb.ZCount(ctx, key, "-inf", nowMs).Result(); err != nil {
		return nil, fmt.Errorf("admin: delay set %q: zcount: %w", key, err)
	}
	if info.Overdue > 0 {
		info.OldestOverdue = now.Sub(info.NextDue)
	}
	return info, nil
}
