package settle

import (
	"time"

	"github.com/settlekit/settle/delayed"
)

// MountOption configures one mount (App.Mount). Options never fail: App.Validate
// reports values it refuses.
type MountOption interface {
	applyMount(*mountConfig)
}

// StreamOption configures a Stream source.
type StreamOption interface {
	applyStream(*streamConfig)
}

// PublisherOption configures a Publisher.
type PublisherOption interface {
	applyPublisher(*publisherConfig)
}

type mountConfig struct {
	codec            Codec
	concurrency      int
	deadLetter       string
	deadLetterMaxLen int64
	delay            delayed.Strategy
	maxAttempts      int
	middleware       []Middleware
	name             string
}

// DefaultConcurrency is how many handlers of one mount run at once unless Concurrency
// says otherwise.
const DefaultConcurrency = 10

func defaultMountConfig() mountConfig {
	return mountConfig{codec: Msgpack, concurrency: DefaultConcurrency, delay: delayed.InProcess{}}
}

type mountOptionFunc func(*mountConfig)

func (f mountOptionFunc) applyMount(c *mountConfig) { f(c) }

// MaxAttempts caps the deliveries of one message, the first included: the n-th failed
// delivery is not retried but dead-lettered (or, with no DeadLetter declared, rejected
// with a warning). A delayed retry counts like an immediate one. With a cap, every
// transport but the claiming stream retries by writing a copy, so the count travels with
// the message. n must be at least 1. Defaults to no cap.
func MaxAttempts(n int) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.maxAttempts = n })
}

// DeadLetter names where a message goes once its attempts are spent: a destination of
// the kind the message arrived on (a stream key for a stream mount). The dead letter
// keeps the payload and headers as they arrived, with the retry count set to the
// attempts spent and the HeaderDead* headers added; writing it and completing the
// original is one atomic step. Declared without MaxAttempts, the first failure
// dead-letters. Drop never dead-letters. Defaults to none.
func DeadLetter(dest string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.deadLetter = dest })
}

// DeadLetterMaxLen bounds a dead-letter stream to about n entries (XADD MAXLEN ~ n):
// the oldest dead letters are trimmed. Defaults to unbounded.
func DeadLetterMaxLen(n int64) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.deadLetterMaxLen = n })
}

// Concurrency sets how many handlers of the mount run at once. Defaults to
// DefaultConcurrency.
func Concurrency(n int) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.concurrency = n })
}

// DelayIn chooses where RetryAfter delays wait. Defaults to delayed.InProcess{}.
func DelayIn(s delayed.Strategy) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.delay = s })
}

// Name names the mount in logs, errors and OnSettled events. Defaults to
// "<kind> <key>" plus "/<group>" where the source has a group.
func Name(name string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.name = name })
}

// Use wraps the mount's handler in middleware; the first one given is the outermost.
func Use(mw ...Middleware) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.middleware = append(c.middleware, mw...) })
}

// CodecOption is both a MountOption and a PublisherOption: see WithCodec.
type CodecOption struct{ codec Codec }

// WithCodec sets the payload codec of a mount (used by Message.Decode and Typed) or a
// Publisher. Defaults to Msgpack.
func WithCodec(c Codec) CodecOption { return CodecOption{codec: c} }

func (o CodecOption) applyMount(c *mountConfig)         { c.codec = o.codec }
func (o CodecOption) applyPublisher(c *publisherConfig) { c.codec = o.codec }

type streamConfig struct {
	batch    int
	block    time.Duration
	consumer string
	reclaim  time.Duration // Reclaim's idle; 0: no reclaim
	startID  string
}

// Stream defaults.
const (
	// DefaultBatch is the most entries one XREADGROUP asks for.
	DefaultBatch = 100
	// DefaultBlock is the longest one XREADGROUP blocks waiting for entries; it also
	// bounds how long a shutdown waits for a read in progress.
	DefaultBlock = time.Second
)

type streamOptionFunc func(*streamConfig)

func (f streamOptionFunc) applyStream(c *streamConfig) { f(c) }

// ReadOption configures how a source reads (Batch, Block). It is a StreamOption, a
// ListOption, a ReliableListOption and a PubSubOption.
type ReadOption struct {
	set func(batch *int, block *time.Duration)
}

func (o ReadOption) applyStream(c *streamConfig) { o.set(&c.batch, &c.block) }

// Batch sets the most entries (list items, channel messages) one read asks for; a read
// never asks for more than the mount has free handler slots. Defaults to DefaultBatch.
func Batch(n int) ReadOption {
	return ReadOption{set: func(batch *int, _ *time.Duration) { *batch = n }}
}

// Block sets the longest a read blocks waiting for entries. It bounds how long a
// graceful shutdown waits for a read in progress (go-redis cannot interrupt one). Lists
// block in whole seconds (BLPOP, BLMOVE): a list rounds Block up to the next second.
// Defaults to DefaultBlock.
func Block(d time.Duration) ReadOption {
	return ReadOption{set: func(_ *int, block *time.Duration) { *block = d }}
}

// Consumer sets the consumer name within the group. Give each process a stable name of
// its own (a pod name, say) so that a restarted process first re-reads the entries it
// had been delivered but not settled. Defaults to "<hostname>-<pid>-<random>", unique
// per process.
//
// On a ReliableList the name also names the consumer's processing list and heartbeat.
func Consumer(name string) ConsumerOption {
	return ConsumerOption{name: name}
}

// ConsumerOption names a consumer (see Consumer). It is a StreamOption and a
// ReliableListOption.
type ConsumerOption struct{ name string }

func (o ConsumerOption) applyStream(c *streamConfig) { c.consumer = o.name }

// StartAt sets where a consumer group created by the mount starts: "0" reads the whole
// stream, "$" only entries added after the group is created. A group that already exists
// keeps its position. Defaults to "0".
func StartAt(id string) StreamOption {
	return streamOptionFunc(func(c *streamConfig) { c.startID = id })
}
