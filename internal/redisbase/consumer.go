package redisbase

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/source"
)

// DefaultConsumerName is unique per process: host, pid and a random suffix.
func DefaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "settle"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// MinServerBlock is the shortest block a Redis server times out with any precision: it
// checks blocked clients' timeouts on its cron (hz 10 by default, every 100 ms), so a
// short BLOCK returns up to a tick late. A read bounded by a delay coming due sooner
// than this does not block in Redis: it reads without blocking and then waits on the
// client.
const MinServerBlock = 100 * time.Millisecond

// PollWait waits d on the wall clock, or until ctx ends. It stands in for a short Redis
// block (a poll bound, never a settlement delay), so it runs on real time like the
// Redis-side block it replaces.
func PollWait(ctx context.Context, d time.Duration) {
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

// PoolOf is a mount's use of c's connection pool when it holds held connections while
// it waits (a blocking read holds one for its Block). The size is known for a
// *redis.Client (a failover client too); a cluster client's pools are per node and not
// counted.
func PoolOf(c redis.UniversalClient, held int) source.Pool {
	if rc, ok := c.(*redis.Client); ok {
		return source.Pool{Client: rc, Held: held, Size: rc.Options().PoolSize}
	}
	return source.Pool{}
}
