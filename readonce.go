package settle

import (
	"context"

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
