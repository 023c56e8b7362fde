package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/settlekit/settle/admin"
)

// row is one mount or inbox of the overview: its figures, -1 where it has none.
type row struct {
	// Charts are its last hour, drawn (none before the first sample).
	Charts []chart
	// Dead is how many dead letters it holds.
	Dead int64
	// EntriesAdded is how many entries were ever added to its stream, -1 where unknown:
	// the write rate is its change over time.
	EntriesAdded int64
	// EntriesRead is how many entries its group has read (a stream kind), -1 where
	// unknown: the read rate is its change over time.
	EntriesRead int64
	// Delayed is how many retries wait in its delay set.
	Delayed int64
	// Err says why its figures could not be read ("" when they were).
	Err string
	// Href is its page.
	Href string
	// Kind is its mount kind, KindPartitionedStream, or "inbox".
	Kind string
	// Lag is how many entries wait to be read: a stream group's lag, a list's length,
	// an inbox's due rows.
	Lag int64
	// Length is the stream's or list's length, or the rows an inbox's groups hold.
	Length int64
	// Name names it.
	Name string
	// OldestIdle is how long its oldest pending entry has gone untouched (an inbox: how
	// long its oldest due row has been due).
	OldestIdle time.Duration
	// Overdue is how many of its delayed retries are due and not yet swept back.
	Overdue int64
	// Paused says which of it is paused ("" when nothing is).
	Paused string
	// Pending is how many entries are delivered and not settled: a stream group's
	// pending entries, a reliable list's processing lists, an inbox's leased rows.
	Pending int64
	// Problems say what needs an operator, first on the page and in red: no live
	// consumer, entries held by dead consumers (how many, how long), an overdue delay set.
	Problems []string
	// State is "running" (consumers are reading), "paused", or what is known instead.
	State string
}

// overviewPage is the overview's data: a row for each mount and inbox, and where their
// charts come from.
type overviewPage struct {
	// Charts says where the charts come from.
	Charts chartHead
	// Rows are the mounts and inboxes, those with problems first.
	Rows []row
}

// overview serves the overview: one row for each mount, partitioned stream and inbox.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	var rows []row
	var head chartHead
	for k, m := range c.mounts {
		rw := c.mountRow(r.Context(), m)
		rw.Charts = c.chartsOf(r, "mount:"+m.Name, m.Name, fmt.Sprintf("m%d", k), &head)
		rows = append(rows, rw)
	}
	for k, ps := range c.partitioned {
		rw := c.partitionedRow(r.Context(), ps)
		rw.Charts = c.chartsOf(r, "partitioned:"+ps.Name, "", fmt.Sprintf("p%d", k), &head)
		rows = append(rows, rw)
	}
	for k, ib := range c.inboxes {
		rw := c.inboxRow(r.Context(), ib)
		rw.Charts = c.chartsOf(r, "inbox:"+ib.Name, "", fmt.Sprintf("i%d", k), &head)
		rows = append(rows, rw)
	}
	c.ranges(&head, c.path())
	// The mounts that need an operator first, in their order.
	sort.SliceStable(rows, func(a, b int) bool { return len(rows[a].Problems) > 0 && len(rows[b].Problems) == 0 })
	refresh := 0
	if c.refresh > 0 {
		refresh = max(1, int(c.refresh/time.Second))
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Data: overviewPage{Charts: head, Rows: rows}, Refresh: refresh})
}

// mountRow reads the figures of the Redis mount m.
func (c *Console) mountRow(ctx context.Context, m Mount) row {
	rw := row{Name: m.Name, Kind: m.Kind, Href: c.path("mounts", m.Name), Dead: -1, Delayed: -1, EntriesAdded: -1, EntriesRead: -1, Overdue: -1, Pending: -1}
	err := func() error {
		if m.isStream() {
			s, err := c.opts.Admin.Stream(ctx, m.Key, m.Group, admin.ReclaimIdle(m.ReclaimIdle))
			if err != nil {
				return err
			}
			rw.Length, rw.Lag, rw.Pending, rw.OldestIdle = s.Length, s.Lag, s.Pending, s.OldestPendingIdle
			rw.EntriesAdded, rw.EntriesRead = s.EntriesAdded, s.EntriesRead
			if s.Paused {
				rw.Paused = "paused"
			}
			rw.streamState(s)
		} else {
			l, err := c.list(ctx, m)
			if err != nil {
				return err
			}
			rw.Length, rw.Lag = l.Length, l.Length
			if m.Kind == KindReliableList {
				rw.Pending = l.Processing
			}
			rw.listState(m, l)
			paused, err := c.opts.Admin.Paused(ctx, m.Key, "")
			if err != nil {
				return err
			}
			if paused {
				rw.Paused = "paused"
			}
		}
		if m.Delayed != "" {
			d, err := c.opts.Admin.DelaySet(ctx, m.Delayed)
			if err != nil {
				return err
			}
			rw.Delayed, rw.Overdue = d.Size, d.Overdue
			if d.Overdue > 0 {
				rw.Problems = append(rw.Problems, fmt.Sprintf("%d delayed %s overdue (no read sweeps them back)", d.Overdue, plural(int(d.Overdue), "retry", "retries")))
			}
		}
		if m.DeadLetter != "" {
			n, err := c.opts.Admin.Length(ctx, m.DeadLetter)
			if err != nil {
				return err
			}
			rw.Dead = n
		}
		return nil
	}()
	if err != nil {
		rw.Err, rw.State = err.Error(), "unreadable"
		rw.Problems = append(rw.Problems, "cannot be read")
	}
	if rw.Paused != "" {
		rw.State = rw.Paused
	}
	return rw
}

// streamState judges a stream mount by its group's consumers, from each one's idle
// against the reclaim bound (XINFO CONSUMERS): one that read within it is live; one
// idle past it holding entries is dead.
func (rw *row) streamState(s *admin.StreamInfo) {
	live, unknown := 0, 0
	var held int64
	var heldIdle time.Duration
	for _, c := range s.Consumers {
		switch {
		case c.Dead:
			held += c.Pending
			heldIdle = max(heldIdle, c.Idle)
		case c.Idle < 0:
			unknown++ // a server that does not say (miniredis)
		case c.Idle < s.ReclaimIdle:
			live++
		}
	}
	if held > 0 {
		rw.Problems = append(rw.Problems, fmt.Sprintf("%d %s held by dead consumers, idle up to %s", held, plural(int(held), "entry", "entries"), showDuration(heldIdle)))
	}
	if live == 0 && unknown > 0 {
		rw.State = "unknown: the server tells no consumer's idle time"
		return
	}
	if live == 0 {
		rw.State = "no live consumer"
		if rw.Lag != 0 || s.Pending > 0 {
			rw.Problems = append(rw.Problems, fmt.Sprintf("no consumer has read within the reclaim bound (%s)", showDuration(s.ReclaimIdle)))
		}
		return
	}
	rw.State = fmt.Sprintf("running: %d reading", live)
}

// listState judges a list mount: a reliable list by its consumers' heartbeats, a plain
// list not at all (it keeps no record of its consumers).
func (rw *row) listState(m Mount, l *admin.ReliableListInfo) {
	if m.Kind != KindReliableList {
		rw.State = "unknown: a list keeps no record of its consumers"
		return
	}
	live := 0
	var orphaned int64
	for _, c := range l.Consumers {
		if c.Alive {
			live++
		} else {
			orphaned += c.Processing
		}
	}
	if orphaned > 0 {
		rw.Problems = append(rw.Problems, fmt.Sprintf("%d %s held by consumers whose heartbeat expired", orphaned, plural(int(orphaned), "item", "items")))
	}
	if live == 0 {
		rw.State = "no live consumer"
		if l.Length > 0 {
			rw.Problems = append(rw.Problems, "no consumer's heartbeat is alive")
		}
		return
	}
	rw.State = fmt.Sprintf("running: %d alive", live)
}

// list reads the list of the list mount m: a missing key is an empty list.
func (c *Console) list(ctx context.Context, m Mount) (*admin.ReliableListInfo, error) {
	l, err := c.opts.Admin.ReliableList(ctx, m.Key)
	if errors.Is(err, admin.ErrKeyNotFound) {
		return &admin.ReliableListInfo{Key: m.Key}, nil
	}
	return l, err
}

// inboxRow reads the figures of the inbox ib: its groups' rows added up, its dead
// letters counted, its paused groups named.
func (c *Console) inboxRow(ctx context.Context, ib Inbox) row {
	rw := row{Name: ib.Name, Kind: "inbox", Href: c.path("inboxes", ib.Name), Overdue: -1, Dead: -1, EntriesAdded: -1, EntriesRead: -1}
	groups, err := c.groups(ctx, ib)
	if err != nil {
		rw.Err = err.Error()
		return rw
	}
	paused := 0
	for _, g := range groups {
		rw.Length += g.Due + g.Leased + g.Waiting
		rw.Lag += g.Due
		rw.Pending += g.Leased
		rw.Delayed += g.Waiting
		rw.OldestIdle = max(rw.OldestIdle, g.OldestDue)
		if g.Paused {
			paused++
		}
	}
	switch {
	case paused == 1 && len(groups) == 1:
		rw.Paused = "paused"
	case paused > 0:
		rw.Paused = fmt.Sprintf("%d of %d groups paused", paused, len(groups))
	}
	if len(ib.Dead) > 0 {
		rw.Dead = 0
	}
	for _, d := range ib.Dead {
		v, err := ib.Inbox.View(ctx, "", d)
		if err != nil {
			rw.Err = err.Error()
			return rw
		}
		rw.Dead += v.Dead
	}
	return rw
}
