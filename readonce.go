package settle

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// xreadOnce is an XREADGROUP that go-redis must not send twice. go-redis retries a
// command whose connection failed (EOF, reset) on a new connection; for a read of new
// entries (id ">") that is not safe: if Redis ran the first read and its reply was lost,
// the entries it delivered are pending at the consumer, and the retried read returns
// only newer ones, so those are never handled while the consumer runs. With NoRetry the
// failure reaches the transport, which then re-reads its own pending entries.
type xreadOnce struct{ *redis.XStreamSliceCmd }

// NoRetry keeps go-redis from running the read again after a connection failure.
func (xreadOnce) NoRetry() bool { return true }

// xreadGroupOnce runs XREADGROUP a once, without go-redis's retries (see xreadOnce).
func xreadGroupOnce(ctx context.Context, rdb redis.UniversalClient, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	// The command is built on a pipeline that is never run: the only exported way to get
	// it with its blocking read timeout set (BLOCK plus go-redis's margin).
	cmd := rdb.Pipeline().XReadGroup(ctx, a)
	_ = rdb.Process(ctx, xreadOnce{cmd})
	return cmd
}

// stringOnce is a list move (LMOVE, BLMOVE) that go-redis must not send twice: if Redis
// moved the item and the reply was lost, a retry would move another one and the first
// would sit in the processing list unseen. With NoRetry the failure reaches the
// transport, which then re-reads its processing list.
type stringOnce struct{ *redis.StringCmd }

// NoRetry keeps go-redis from running the move again after a connection failure.
func (stringOnce) NoRetry() bool { return true }

// lmoveOnce queues an LMOVE of the head of key to the tail of dest on p, not retried.
func lmoveOnce(ctx context.Context, p redis.Pipeliner, key, dest string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "lmove", key, dest, "left", "right")
	_ = p.Process(ctx, stringOnce{cmd})
	return cmd
}

// blmoveOnce runs a BLMOVE of the head of key to the tail of dest, blocking up to wait
// (sub-second waits as a decimal timeout), not retried.
func blmoveOnce(ctx context.Context, rdb redis.UniversalClient, key, dest string, wait time.Duration) (string, error) {
	var cmd *redis.StringCmd
	if wait >= time.Second {
		// Built on a pipeline that is never run, for its blocking read timeout (see
		// xreadGroupOnce).
		cmd = rdb.Pipeline().BLMove(ctx, key, dest, "LEFT", "RIGHT", wait.Truncate(time.Second))
	} else {
		timeout := strconv.FormatFloat(max(wait, time.Millisecond).Seconds(), 'f', 3, 64)
		cmd = redis.NewStringCmd(ctx, "blmove", key, dest, "left", "right", timeout)
	}
	_ = rdb.Process(ctx, stringOnce{cmd})
	return cmd.Result()
}
