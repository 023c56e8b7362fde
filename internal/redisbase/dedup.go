package redisbase

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// Dedup is a Redis transport's settle.Dedupe marks: its mark set (keys.Dedup) and the
// mount's window. The zero value (no Dedupe) marks nothing and costs nothing.
type Dedup struct {
	env source.Env
	rdb redis.Scripter
	set string
}

// DedupOf returns the marks of the mount env describes, kept in set on rdb.
func DedupOf(env source.Env, rdb redis.Scripter, set string) Dedup {
	return Dedup{env: env, rdb: rdb, set: set}
}

// now is "now" for the scripts: the test's clock in ms, or -1 for the server's TIME.
func (d Dedup) now() int64 {
	if d.env.TestClock != nil {
		return d.env.TestClock.Now().UnixMilli()
	}
	return -1
}

// Completed reports which of keys have a live mark (source.Deduper), in one script call.
func (d Dedup) Completed(ctx context.Context, keys []string) ([]bool, error) {
	return script.DedupSeen(ctx, d.rdb, d.set, d.now(), keys)
}

// Marks returns the marks of ds's completion, one key per delivery, or nil when the mount
// has no Dedupe or none of ds carries a key: the completion then runs as without it.
func (d Dedup) Marks(ds []*source.Delivery) *script.Marks {
	w := d.env.Policy.DedupWindow
	if w <= 0 {
		return nil
	}
	var keys []string
	for i, dl := range ds {
		if dl.DedupKey != "" && keys == nil {
			keys = make([]string, len(ds))
		}
		if keys != nil {
			keys[i] = dl.DedupKey
		}
	}
	if keys == nil {
		return nil
	}
	return &script.Marks{Keys: keys, Now: d.now(), Set: d.set, Window: w}
}
