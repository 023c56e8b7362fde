package settle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redispartition"
	"github.com/settlekit/settle/internal/redisstream"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// StreamSource reads a Redis stream through a consumer group. Make one with Stream.
type StreamSource struct {
	cfg   streamConfig
	group string
	key   string
	rdb   redis.UniversalClient
}

var _ Source = (*StreamSource)(nil)

// Stream returns a source that reads the stream key through the consumer group group
// (XREADGROUP batches), creating both if missing; an existing group is used as it is. A
// consumer first re-reads its own pending entries (delivered to its name, never
// settled), then new ones. Retries are copies appended to the stream; dead letters go to
// a stream; see the package doc for the whole table.
func Stream(rdb redis.UniversalClient, key, group string, opts ...StreamOption) *StreamSource {
	cfg := defaultStreamConfig()
	cfg.reclaim = DefaultReclaim
	for _, o := range opts {
		if o != nil {
			o.applyStream(&cfg)
		}
	}
	return &StreamSource{cfg: cfg, group: group, key: key, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *StreamSource) Transport(env source.Env) source.Transport {
	return redisstream.New(env, s.config())
}

// config is what the stream transport is given.
func (s *StreamSource) config() redisstream.Config {
	c := s.cfg
	return redisstream.Config{Batch: c.batch, Block: c.block, Client: s.rdb, Consumer: c.consumer, Group: s.group, Key: s.key,
		Reclaim: c.reclaim, StartID: c.startID, TrimKeep: c.trimKeep, TrimOff: c.trimOff}
}

// Seek moves the consumer group's position back (or forward) to id (XGROUP SETID): the
// entries after id are delivered again, to whichever consumers of the group read next,
// as new deliveries. "0" replays the whole stream; "$" skips to its end. A group that
// does not exist yet is created at id.
//
// A replayed entry's attempt comes from its retry-count header, which Seek does not
// change: an entry that was a retry copy is delivered with the attempt it had. Entries
// still pending when Seek is called are handed to the consumer that reads them next;
// one still in flight at a consumer of this process is not handled twice. Only entries
// the stream still holds come back: a mount trims what every group acknowledged once
// older than its Trim keep (an hour by default).
//
// Seek may be called at any time, while an App runs the source or not.
func (s *StreamSource) Seek(ctx context.Context, id string) error {
	err := s.rdb.XGroupSetID(ctx, s.key, s.group, id).Err()
	if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		err = s.rdb.XGroupCreateMkStream(ctx, s.key, s.group, id).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
			// Created meanwhile by a consumer starting: move it.
			err = s.rdb.XGroupSetID(ctx, s.key, s.group, id).Err()
		}
	}
	if err != nil {
		return fmt.Errorf("settle: stream %q: seek group %q to %q: %w", s.key, s.group, id, err)
	}
	return nil
}

// TrimOption sets how a stream mount trims its stream (see Trim). It is a StreamOption
// and a ClaimingStreamOption.
type TrimOption struct {
	keep time.Duration
	off  bool
}

func (o TrimOption) applyStream(c *streamConfig)         { c.trimKeep, c.trimOff = o.keep, o.off }
func (o TrimOption) applyClaimingStream(c *streamConfig) { c.trimKeep, c.trimOff = o.keep, o.off }

// Trim sets how long the mount keeps the entries that every consumer group of its
// stream has acknowledged: about once a minute each consumer removes the entries older
// than keep (by their ids' time, against the Redis server's TIME) that lie below every
// group's oldest pending entry and last-delivered id (XTRIM MINID at the least of
// those), in one Lua script, so that no entry pending or unread by any group is ever
// trimmed, and a group created meanwhile cannot lose one. keep is the window in which
// an operator can still seek a group back (admin Seek, StreamSource.Seek) and replay
// what it had acknowledged; 0 trims acknowledged entries at once.
//
// Only the groups that exist are protected: a group created later starts where it is
// told, and cannot read what was trimmed before; a stream with no group at all, and
// readers that use no group (XREAD, XRANGE), are not protected: use NoTrim for a stream
// kept as a log. A dead-letter stream is never trimmed by a mount, whoever reads it (a
// review mount's group acknowledges every dead letter): bound it with DeadLetterMaxLen
// on the mounts that write to it. A negative keep is refused. Defaults to
// DefaultTrimKeep.
func Trim(keep time.Duration) TrimOption { return TrimOption{keep: keep} }

// NoTrim keeps every entry of the mount's stream: it grows until something else trims
// it (the Publisher's MaxLen or MinID, XTRIM). For a stream that is also a log read
// without a consumer group. Defaults to trimming (see Trim).
func NoTrim() TrimOption { return TrimOption{off: true} }

// trim removes the entries every group of the stream acknowledged and older than the
// mount's keep, at most once per trimEvery of the App's clock. A failure is logged

// StreamOption configures a Stream source.
type StreamOption interface {
	applyStream(*streamConfig)
}

type streamConfig struct {
	batch    int
	block    time.Duration
	consumer string
	reclaim  time.Duration // Reclaim's idle; 0: no reclaim
	startID  string
	trimKeep time.Duration // Trim's keep
	trimOff  bool          // NoTrim
}

// Stream defaults.
const (
	// DefaultReclaim is how long a Stream consumer waits before it takes over an entry
	// another consumer left pending (see Reclaim).
	DefaultReclaim = time.Minute
	// DefaultBatch is the most entries one XREADGROUP asks for.
	DefaultBatch = 100
	// DefaultBlock is the longest one XREADGROUP blocks waiting for entries; it also
	// bounds how long a shutdown waits for a read in progress.
	DefaultBlock = time.Second
)

func defaultStreamConfig() streamConfig {
	return streamConfig{batch: DefaultBatch, block: DefaultBlock, startID: "0", trimKeep: DefaultTrimKeep}
}

type streamOptionFunc func(*streamConfig)

func (f streamOptionFunc) applyStream(c *streamConfig) { f(c) }

// StartAt sets where a consumer group created by the mount starts: "0" reads the whole
// stream, "$" only entries added after the group is created. A group that already exists
// keeps its position. Defaults to "0".
func StartAt(id string) StartOption { return StartOption{id: id} }

// StartOption sets where a new consumer group starts (see StartAt). It is a
// StreamOption and a ClaimingStreamOption.
type StartOption struct{ id string }

func (o StartOption) applyStream(c *streamConfig)         { c.startID = o.id }
func (o StartOption) applyClaimingStream(c *streamConfig) { c.startID = o.id }

func (o StartOption) applyPartitionedStream(c *partitionedConfig) { c.startID = o.id }
func (o TrimOption) applyPartitionedStream(c *partitionedConfig) {
	c.trimKeep, c.trimOff = o.keep, o.off
}
func (o ReadOption) applyPartitionedStream(c *partitionedConfig)       { o.set(&c.batch, &c.block) }
func (o ConsumerOption) applyPartitionedStream(c *partitionedConfig)   { c.consumer = o.name }
func (f streamOptionFunc) applyPartitionedStream(c *partitionedConfig) { f(&c.streamConfig) }

// Reclaim sets how long an entry must have been left pending by another consumer of the
// group before a Stream consumer takes it over: the entries of a consumer whose process
// died. A reclaimed entry's attempt counts its unsettled deliveries, so a message that
// kills its consumers reaches the cap. Entries are taken over one at a time, each run
// alone once the last settled: a crash charges every entry its process held, and a
// message that kills its consumers then spends no other's attempts. While a handler runs (or waits, read ahead), its
// entry's idle time is reset every idle/3, so that no live handler's entry is taken
// over by a settle consumer. The consumer that scans also removes from the group the
// consumers that hold no entry and have been idle ten times as long (at least 10 min).
// idle must be at least a millisecond. Defaults to DefaultReclaim.
func Reclaim(idle time.Duration) StreamOption {
	return streamOptionFunc(func(c *streamConfig) { c.reclaim = idle })
}

// DefaultTrimKeep is how long a Stream or ClaimingStream mount keeps the entries every
// group of its stream has acknowledged, unless Trim or NoTrim says otherwise.
const DefaultTrimKeep = time.Hour

// PartitionedStreamSource reads a partitioned stream: one logical stream that is N Redis
// streams, each in a hash slot of its own, so that a Redis Cluster spreads them over its
// masters. Make one with PartitionedStream.
type PartitionedStreamSource struct {
	cfg   partitionedConfig
	group string
	name  string
	rdb   redis.UniversalClient
}

var _ Source = (*PartitionedStreamSource)(nil)

// PartitionedStream returns a source that reads the partitioned stream name through the
// consumer group group. Partitions(n) is required. Its keys:
//
//	name                    the meta key: a hash recording n and the hash (a plain
//	                        XADD to name fails: publish with a Publisher and Key)
//	{name:i}                partition i's stream, 0 <= i < n
//	{name:i}:<key>          partition i's delay set (DelayIn(delayed.DurableZset{Key:
//	                        key})), dead letters (DeadLetter(key)) and replies (ReplyTo(key))
//
// so DeadLetter("dead") sends partition 3's dead letters to "{name:3}:dead". The name
// must not hold braces. A Publisher's Key(k) sends a message to partition
// PartitionFor(k, n). Each partition is read, retried, delayed, trimmed and
// dead-lettered as a Stream is (Reclaim, Trim, StartAt, Batch, Block and Consumer apply
// to each).
//
// Each partition is read by one member of the group at a time (a member is a mount,
// named by Consumer): partitions are spread evenly over the live members (rendezvous
// hashing, its load bounded) and each is held by a lease with a fencing token, renewed
// every third of LeaseTTL and checked before each settlement batch; a new owner first
// takes over the partition's pending entries; a graceful stop hands them over at once
// (README, Partitioned streams).
//
// The layout is recorded at the first start; a mount declaring another n is refused
// while the partitions of the recorded layout hold anything unsettled (pending, unread
// by a group, or waiting in the delay set). To change n: stop the publishers, let the
// consumers drain the stream, then start the mounts with the new n (the first to start
// records it).
func PartitionedStream(rdb redis.UniversalClient, name, group string, opts ...PartitionedStreamOption) *PartitionedStreamSource {
	cfg := partitionedConfig{streamConfig: defaultStreamConfig()}
	cfg.reclaim = DefaultReclaim
	for _, o := range opts {
		if o != nil {
			o.applyPartitionedStream(&cfg)
		}
	}
	return &PartitionedStreamSource{cfg: cfg, group: group, name: name, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *PartitionedStreamSource) Transport(env source.Env) source.Transport {
	c := s.cfg
	return redispartition.New(env, redispartition.Config{LeaseTTL: c.leaseTTL, Name: s.name, Partitions: c.partitions,
		Stream: redisstream.Config{Batch: c.batch, Block: c.block, Client: s.rdb, Consumer: c.consumer, Group: s.group,
			Reclaim: c.reclaim, StartID: c.startID, TrimKeep: c.trimKeep, TrimOff: c.trimOff}})
}

// Declare records the partitioned stream's layout (its partitions and hash) in its meta
// key, as a mount's start does, so that publishers may write to it before any mount has
// started. It returns an error when another layout is recorded (see PartitionedStream
// for changing it), or when the name holds another key (a plain stream).
func (s *PartitionedStreamSource) Declare(ctx context.Context) error {
	if err := keys.CheckPartitionName(s.name); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	n, _, err := script.PartitionMeta(ctx, s.rdb, s.name, s.cfg.partitions, keys.PartitionHashName, 0)
	if err != nil {
		return fmt.Errorf("settle: partitioned stream %q: %w", s.name, err)
	}
	if n != s.cfg.partitions {
		return fmt.Errorf("settle: partitioned stream %q has %d partitions recorded, not %d", s.name, n, s.cfg.partitions)
	}
	return nil
}

// PartitionFor returns the partition a message with key goes to among n partitions: the
// FNV-1a 32-bit hash of key's bytes (offset basis 2166136261, prime 16777619), mod n.
// FNV-1a of "customer-1" is 0x124fb217, so it goes to partition 7 of 16. A publisher in
// another language computes the same and XADDs to "{name:i}".
func PartitionFor(key string, n int) int { return keys.PartitionFor(key, n) }

// PartitionedStreamOption configures a PartitionedStream source: Partitions, and the
// stream options that apply to each partition (Reclaim, Trim, NoTrim, StartAt, Batch,
// Block, Consumer).
type PartitionedStreamOption interface {
	applyPartitionedStream(*partitionedConfig)
}

type partitionedConfig struct {
	streamConfig
	leaseTTL   time.Duration
	partitions int
}

// PartitionsOption sets how many partitions a partitioned stream has (see Partitions).
type PartitionsOption struct{ n int }

func (o PartitionsOption) applyPartitionedStream(c *partitionedConfig) { c.partitions = o.n }

// Partitions sets how many partitions a partitioned stream has, from 1 to 1024: how many
// Redis threads (cluster masters) it can spread over, and how many members of its group
// can read it at once. Required; every mount of the stream must declare the same n
// (see PartitionedStream for changing it).
func Partitions(n int) PartitionsOption { return PartitionsOption{n: n} }

// LeaseTTLOption sets how long a member's lease on a partition lasts (see LeaseTTL).
type LeaseTTLOption struct{ d time.Duration }

func (o LeaseTTLOption) applyPartitionedStream(c *partitionedConfig) { c.leaseTTL = o.d }

// LeaseTTL sets how long a member of a partitioned stream's group holds a partition
// (and counts as live) without renewing: it renews every third of d, and a crashed
// member's partitions move to the others within d (plus a third of d for them to
// notice). A graceful stop hands them over at once. Defaults to 10 s.
func LeaseTTL(d time.Duration) LeaseTTLOption { return LeaseTTLOption{d: d} }
