package settle

import (
	"context"
	"time"
)

// minServerBlock is the shortest block a Redis server times out with any precision: it
// checks blocked clients' timeouts on its cron (hz 10 by default, every 100 ms), so an
// XREADGROUP BLOCK 5 returns after up to 100 ms (measured on redis-server 7.0: BLOCK 5,
// 20 and 50 all took 94–103 ms). A read bounded by a delay coming due sooner than this
// does not block in Redis: it reads without blocking and then waits on the client.
const minServerBlock = 100 * time.Millisecond

// pollWait waits d on the wall clock, or until ctx ends. It stands in for a short Redis
// block (a poll bound, never a settlement delay), so it runs on real time like the
// Redis-side block it replaces.
func pollWait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
