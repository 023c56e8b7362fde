package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/settlekit/settle/admin"
)

// row is one mount or inbox of the overview: its figures, -1 where it has none.
type row struct {
	// Dead is how many dead letters it holds.
	Dead int64
	// Delayed is how many retries wait in its delay set.
	Delayed int64
	// Err says why its figures could not be read ("" when they were).
	Err string
	// Href is its page.
	Href string
	// Kind is its mount kind, or "inbox".
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
}

// overview serves the overview: one row for each mount and each inbox.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	var rows []row
	for _, m := range c.mounts {
		rows = append(rows, c.mountRow(r.Context(), m))
	}
	for _, ib := range c.inboxes {
		rows = append(rows, c.inboxRow(r.Context(), ib))
	}
	refresh := 0
	if c.refresh > 0 {
		refresh = max(1, int(c.refresh/time.Second))
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Data: rows, Refresh: refresh})
}

// mountRow reads the figures of the Redis mount m.
func (c *Console) mountRow(ctx context.Context, m Mount) row {
	rw := row{Name: m.Name, Kind: m.Kind, Href: c.path("mounts", m.Name), Dead: -1, Delayed: -1, Overdue: -1, Pending: -1}
	err := func() error {
		if m.isStream() {
			s, err := c.opts.Admin.Stream(ctx, m.Key, m.Group, admin.ReclaimIdle(m.ReclaimIdle))
			if err != nil {
				return err
			}
			rw.Length, rw.Lag, rw.Pending, rw.OldestIdle = s.Length, s.Lag, s.Pending, s.OldestPendingIdle
			if s.Paused {
				rw.Paused = "paused"
			}
		} else {
			l, err := c.list(ctx, m)
			if err != nil {
				return err
			}
			rw.Length, rw.Lag = l.Length, l.Length
			if m.Kind == KindReliableList {
				rw.Pending = l.Processing
			}
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
		rw.Err = err.Error()
	}
	return rw
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
	rw := row{Name: ib.Name, Kind: "inbox", Href: c.path("inboxes", ib.Name), Overdue: -1, Dead: -1}
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
