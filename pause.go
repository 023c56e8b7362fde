package settle

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// pauseCheck is how often, at most, a mount asks its transport whether an operator
// paused it (on the App's clock, so a test's fake clock moves it): one command or
// statement per mount per period, never one per read.
const pauseCheck = time.Second

// pauseCheckTimeout bounds one check: a check that hangs must not hold the read loop.
const pauseCheckTimeout = 5 * time.Second

// pauseState is what a mount's read loop knows of its pause; only the read loop's
// goroutine touches it.
type pauseState struct {
	checked time.Time // when the transport was last asked (zero: never)
	paused  bool      // its last answer
	failing bool      // the last check failed (the failure streak was logged)
}

// paused reports whether the mount is paused, asking its transport when the last
// answer is pauseCheck old or more on the App's clock, and logging each change at Info
// and the first failure of a streak at Warn (a failed check keeps the last answer).
func (m *mount) paused(ctx context.Context, ps *pauseState) bool {
	now := m.eng.clock.Now()
	if !ps.checked.IsZero() && now.Sub(ps.checked) < pauseCheck {
		return ps.paused
	}
	ps.checked = now
	cctx, cancel := context.WithTimeout(ctx, pauseCheckTimeout)
	p, err := m.transport.Paused(cctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ps.paused // the stop cut the check short: nothing to report
		}
		if !ps.failing {
			m.logger.WarnContext(ctx, "settle: could not check whether the mount is paused; keeping its last state until a check succeeds",
				slog.Bool("paused", ps.paused), slog.Any(attrError, err))
		}
		ps.failing = true
		return ps.paused
	}
	ps.failing = false
	if p != ps.paused {
		ps.paused = p
		if p {
			m.logger.InfoContext(ctx, "settle: paused: reading nothing new until resumed; what the mount holds settles")
		} else {
			m.logger.InfoContext(ctx, "settle: resumed")
		}
	}
	return p
}

// waitPaused waits one pause check period on the App's clock, or until ctx is done.
func (m *mount) waitPaused(ctx context.Context) {
	t := m.eng.clock.NewTimer(pauseCheck)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}

// redisPaused reports whether the control key of key (and group) exists: one EXISTS.
func redisPaused(ctx context.Context, rdb redis.UniversalClient, key, group string) (bool, error) {
	n, err := rdb.Exists(ctx, keys.Paused(key, group)).Result()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// Paused reports whether the stream's group is paused: its control key
// (keys.Paused(stream, group)) exists. A ClaimingStream on the same group shares it.
func (t *streamTransport) Paused(ctx context.Context) (bool, error) {
	return redisPaused(ctx, t.src.rdb, t.src.key, t.src.group)
}

// Paused reports whether the list is paused: its control key (keys.Paused(list, ""))
// exists.
func (t *listTransport) Paused(ctx context.Context) (bool, error) {
	return redisPaused(ctx, t.src.rdb, t.src.key, "")
}

// Paused reports whether the list is paused: its control key (keys.Paused(list, ""))
// exists; a List and a ReliableList on one key share it.
func (t *reliableTransport) Paused(ctx context.Context) (bool, error) {
	return redisPaused(ctx, t.src.rdb, t.src.key, "")
}

// Paused is always false: a Pub/Sub subscriber cannot be paused. Redis keeps nothing
// for it, so a paused subscriber would only lose what is published meanwhile (beyond
// its Buffer); stop the App instead. settle/admin refuses to pause a channel that has
// subscribers.
func (t *pubsubTransport) Paused(context.Context) (bool, error) { return false, nil }
