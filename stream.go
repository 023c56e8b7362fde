package settle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redisstream"
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
// kept as a log. A negative keep is refused. Defaults to DefaultTrimKeep.
func Trim(keep time.Duration) TrimOption { return TrimOption{keep: keep} }

// NoTrim keeps every entry of the mount's stream: it grows until something else trims
// it (the Publisher's MaxLen or MinID, XTRIM). For a stream that is also a log read
// without a consumer group. Defaults to trimming (see Trim).
func NoTrim() TrimOption { return TrimOption{off: true} }

// trim removes the entries every group of the stream acknowledged and older than the
// mount's keep, at most once per trimEvery of the App's clock. A failure is logged
