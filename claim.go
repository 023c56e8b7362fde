package settle

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redisstream"
	"github.com/settlekit/settle/internal/source"
)

// ClaimingStreamSource reads a Redis stream through a consumer group and keeps failed
// entries pending, to be claimed back once idle. Make one with ClaimingStream.
type ClaimingStreamSource struct {
	minIdle time.Duration
	onBeat  func() // tests: called after each heartbeat
	stream  *StreamSource
}

var _ Source = (*ClaimingStreamSource)(nil)

// ClaimingStream returns a source that reads the stream key through the group group like
// Stream, but leaves a retried entry pending, to be claimed back (XCLAIM, XAUTOCLAIM)
// once idle for minIdle, and counts attempts with Redis's delivery counter, crashed
// deliveries included. It also claims entries other consumers left idle that long
// (one at a time, each run alone once the last settled, as Reclaim does), and
// heartbeats the entries it is handling every minIdle/3 so that none is claimed from
// under a live handler. Without a durable delay set, RetryAfter waits minIdle whatever
// it asks (a warning says so once). minIdle must be at least a millisecond.
func ClaimingStream(rdb redis.UniversalClient, key, group string, minIdle time.Duration, opts ...ClaimingStreamOption) *ClaimingStreamSource {
	cfg := defaultStreamConfig()
	for _, o := range opts {
		if o != nil {
			o.applyClaimingStream(&cfg)
		}
	}
	return &ClaimingStreamSource{minIdle: minIdle, stream: &StreamSource{cfg: cfg, group: group, key: key, rdb: rdb}}
}

// Transport is for settle's own use and may change in any release.
func (s *ClaimingStreamSource) Transport(env source.Env) source.Transport {
	return redisstream.NewClaiming(env, s.stream.config(), s.minIdle, s.onBeat)
}

// Seek moves the consumer group's position back (or forward) to id (XGROUP SETID), like
// StreamSource.Seek: the entries after id are delivered again as new deliveries.
//
// Redis counts a replayed entry's deliveries from 1 again, so its attempt restarts: it is
// the retry-count header (unchanged by Seek) plus 1, and the MaxAttempts cap counts from
// the replay. An entry left pending by a Retry is delivered at once, without waiting out
// minIdle. One in flight here when the replay reaches it is not handled twice: it comes
// back after minIdle, like any retry, at the count the replay restarted.
func (s *ClaimingStreamSource) Seek(ctx context.Context, id string) error {
	return s.stream.Seek(ctx, id)
}

// ClaimingStreamOption configures a ClaimingStream source: a Stream's options but
// Reclaim, since a claiming stream always claims what has been idle for its minIdle.
type ClaimingStreamOption interface {
	applyClaimingStream(*streamConfig)
}
