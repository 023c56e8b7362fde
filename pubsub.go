package settle

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redispubsub"
	"github.com/settlekit/settle/internal/source"
)

// PubSubSource subscribes to a Redis Pub/Sub channel or pattern. Make one with PubSub or
// PubSubPattern.
type PubSubSource struct {
	cfg     pubsubConfig
	name    string // a channel, or a pattern when pattern is true
	pattern bool
	rdb     redis.UniversalClient
}

var _ Source = (*PubSubSource)(nil)

// PubSub returns a source subscribed to channel (SUBSCRIBE). Pub/Sub is at-most-once:
// Redis keeps nothing for a subscriber, so a message published while no App listens, or
// being handled when the process dies, is lost, and Retry without MaxAttempts cannot be
// honoured (lost, with a warning). Retry copies are published to the channel they came
// on (or OutRetry), dead letters to the DeadLetter channel.
func PubSub(rdb redis.UniversalClient, channel string, opts ...PubSubOption) *PubSubSource {
	return newPubSub(rdb, channel, false, opts)
}

// PubSubPattern returns a source subscribed to every channel matching pattern
// (PSUBSCRIBE, Redis glob syntax). It must be given OutRetry: retry copies go there. It
// is otherwise PubSub, at-most-once included.
func PubSubPattern(rdb redis.UniversalClient, pattern string, opts ...PubSubOption) *PubSubSource {
	return newPubSub(rdb, pattern, true, opts)
}

func newPubSub(rdb redis.UniversalClient, name string, pattern bool, opts []PubSubOption) *PubSubSource {
	cfg := pubsubConfig{batch: DefaultBatch, block: DefaultBlock, buffer: DefaultBuffer}
	for _, o := range opts {
		if o != nil {
			o.applyPubSub(&cfg)
		}
	}
	return &PubSubSource{cfg: cfg, name: name, pattern: pattern, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *PubSubSource) Transport(env source.Env) source.Transport {
	return redispubsub.New(env, redispubsub.Config{Batch: s.cfg.batch, Block: s.cfg.block, Buffer: s.cfg.buffer, Client: s.rdb, Name: s.name, OutRetry: s.cfg.outRetry, Pattern: s.pattern})
}

// PubSubOption configures a PubSub or PubSubPattern source.
type PubSubOption interface {
	applyPubSub(*pubsubConfig)
}

type pubsubConfig struct {
	batch    int
	block    time.Duration
	buffer   int
	outRetry string
}

type pubsubOptionFunc func(*pubsubConfig)

func (f pubsubOptionFunc) applyPubSub(c *pubsubConfig) { f(c) }

// OutRetry names the channel a subscription publishes its retry copies to. A pattern
// subscription reads many channels and names none, so PubSubPattern requires it: without
// it App.Validate (and so App.Run) refuses the mount. Subscribe to that channel (the
// pattern may match it) to read the copies again. On PubSub it replaces the default, the
// channel the message came on.
func OutRetry(channel string) PubSubOption {
	return pubsubOptionFunc(func(c *pubsubConfig) { c.outRetry = channel })
}

// Buffer sets how many received messages may wait in memory for a free handler. When it
// is full for a minute, go-redis drops messages (at-most-once). Defaults to
// DefaultBuffer.
func Buffer(n int) PubSubOption {
	return pubsubOptionFunc(func(c *pubsubConfig) { c.buffer = n })
}

// DefaultBuffer is how many received channel messages may wait for a handler unless
// Buffer says otherwise.
const DefaultBuffer = 1000
