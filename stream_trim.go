package settle

import (
	"context"
	"log/slog"
	"time"

	"github.com/settlekit/settle/internal/script"
)

// DefaultTrimKeep is how long a Stream or ClaimingStream mount keeps the entries every
// group of its stream has acknowledged, unless Trim or NoTrim says otherwise.
const DefaultTrimKeep = time.Hour

// trimEvery is how often, on the App's clock, each consumer of a stream mount trims.
const trimEvery = time.Minute

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
// and retried at the next turn: reading goes on.
func (t *streamTransport) trim(ctx context.Context) {
	cfg := t.src.cfg
	if cfg.trimOff {
		return
	}
	now := t.env.Clock.Now()
	if now.Before(t.nextTrim) {
		return
	}
	t.nextTrim = now.Add(trimEvery)
	redisNow := int64(-1)
	if t.env.TestClock != nil {
		redisNow = t.env.TestClock.Now().UnixMilli()
	}
	res, err := script.Trim(ctx, t.src.rdb, t.src.key, cfg.trimKeep, redisNow)
	if err != nil {
		if ctx.Err() == nil {
			t.env.Logger.WarnContext(ctx, "settle: trim the stream's acknowledged entries failed; trying again in a minute",
				slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Any(attrError, err))
		}
		return
	}
	if res.Trimmed > 0 {
		t.env.Logger.DebugContext(ctx, "settle: trimmed the stream's acknowledged entries",
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Int64("trimmed", res.Trimmed), slog.String("below", res.Bound))
	}
}
