package redisstream

import (
	"context"
	"log/slog"
	"time"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// trimEvery is how often, on the App's clock, each consumer of a stream mount trims.
const trimEvery = time.Minute

// and retried at the next turn: reading goes on.
func (t *streamTransport) trim(ctx context.Context) {
	cfg := t.cfg
	if cfg.TrimOff {
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
	res, err := script.Trim(ctx, t.cfg.Client, t.cfg.Key, cfg.TrimKeep, redisNow)
	if err != nil {
		if ctx.Err() == nil {
			t.env.Logger.WarnContext(ctx, "settle: trim the stream's acknowledged entries failed; trying again in a minute",
				slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.cfg.Key), slog.Any(source.AttrError, err))
		}
		return
	}
	if res.Trimmed > 0 {
		t.env.Logger.DebugContext(ctx, "settle: trimmed the stream's acknowledged entries",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.cfg.Key), slog.Int64("trimmed", res.Trimmed), slog.String("below", res.Bound))
	}
}
