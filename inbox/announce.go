package inbox

import (
	"context"
	"time"
)

// announceTimeout bounds one notification; announceGap is the least time between two
// rounds of notifications of one Inbox while rows keep coming (a queue woken by the
// first claims while it finds rows: it needs no more until it is idle again).
const (
	announceTimeout = 5 * time.Second
	announceGap     = 25 * time.Millisecond
)

// announce wakes the queues of group waiting for a row: those of this Inbox at once, and
// on PostgreSQL those of every process listening on the table's channel (see listen.go),
// with pg_notify. The notifications go out on a goroutine of their own, one statement a
// group, outside the transaction that wrote the rows: a NOTIFY in the writer's
// transaction would hold PostgreSQL's notification lock through its commit and
// serialize the commits of concurrent publishers: 16 of them published about 15k rows/s
// with no notification, 4.9k with one in each INSERT's transaction, 14k with these
// (BenchmarkPublish in internal/sqltest). The first notification after a quiet spell
// goes at once;
// while rows keep coming, the groups announced meanwhile go together at most every
// announceGap, and the goroutine ends once none is left. A notification that fails only
// leaves the other processes to find the rows when they poll.
func (ib *Inbox) announce(ctx context.Context, s *statements, group string) {
	ib.notify(group)
	if s.notify.text == "" {
		return
	}
	ib.mu.Lock()
	if ib.pending == nil {
		ib.pending = map[string]bool{}
	}
	ib.pending[group] = true
	start := !ib.sending
	ib.sending = true
	ib.mu.Unlock()
	if start {
		go ib.sendAnnouncements(context.WithoutCancel(ctx), s)
	}
}

// sendAnnouncements sends the pending notifications until none is left.
func (ib *Inbox) sendAnnouncements(ctx context.Context, s *statements) {
	for round := 0; ; round++ {
		if round > 0 {
			gap := time.NewTimer(announceGap)
			<-gap.C
		}
		ib.mu.Lock()
		groups := make([]string, 0, len(ib.pending))
		for g := range ib.pending {
			groups = append(groups, g)
		}
		clear(ib.pending)
		if len(groups) == 0 {
			ib.sending = false
			ib.mu.Unlock()
			return
		}
		ib.mu.Unlock()
		for _, g := range groups {
			cctx, cancel := context.WithTimeout(ctx, announceTimeout)
			_, _ = ib.db.ExecContext(cctx, s.notify.text, s.notify.bind(map[string]any{"channel": ib.table.Name, "group": g})...)
			cancel()
		}
	}
}
