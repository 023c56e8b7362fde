package settle

import (
	"context"
	"log/slog"
	"time"
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
