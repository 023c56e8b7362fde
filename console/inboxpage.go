package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/settlekit/settle/inbox"
)

// groupView is one group of an inbox: what it holds and whether it is paused.
type groupView struct {
	inbox.GroupView
	// Pausable reports that the table has a group column (a table without one cannot
	// be paused).
	Pausable bool
	// Paused reports that its mounts are paused.
	Paused bool
}

// groups reads each group of ib.
func (c *Console) groups(ctx context.Context, ib Inbox) ([]groupView, error) {
	pausable := ib.Inbox.Table().Group != ""
	var out []groupView
	for _, g := range ib.Groups {
		v, err := ib.Inbox.View(ctx, g, "")
		if err != nil {
			return nil, err
		}
		gv := groupView{GroupView: *v, Pausable: pausable}
		if pausable {
			if gv.Paused, err = ib.Inbox.Paused(ctx, g); err != nil {
				return nil, err
			}
		}
		out = append(out, gv)
	}
	return out, nil
}

// inboxPage is an inbox's page: its groups, and one page of one of its dead letters.
type inboxPage struct {
	// Base is the inbox page's path, which its forms and links start with.
	Base string
	// Dead is the dead letter shown.
	Dead string
	// DeadCounts counts the rows of each dead letter, in the order of Inbox.Dead.
	DeadCounts []deadCount
	// Filter is the filter box as the request filled it.
	Filter filterForm
	// FilterErr says why the filter was refused ("" when it was not).
	FilterErr string
	// First is the query of the first page ("" on the first page).
	First string
	// Groups are its groups.
	Groups []groupView
	// Inbox is the inbox.
	Inbox Inbox
	// Next is the query of the next page ("" on the last).
	Next string
	// Rows is the page of dead rows.
	Rows []inbox.Row
	// Table is the inbox's table spec.
	Table inbox.Table
}

// deadCount is one dead letter of an inbox and how many rows it holds.
type deadCount struct {
	Count int64
	Name  string
}

// inboxPage serves an inbox's page.
func (c *Console) inboxPage(w http.ResponseWriter, r *http.Request) {
	ib, ok := c.inbox(r.PathValue("name"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such inbox", errNotFound("inbox", r.PathValue("name")))
		return
	}
	ctx := r.Context()
	p := inboxPage{Base: c.path("inboxes", ib.Name), Inbox: ib, Filter: readFilter(r), Table: ib.Inbox.Table()}
	var err error
	if p.Groups, err = c.groups(ctx, ib); err != nil {
		c.fail(w, r, http.StatusBadGateway, "Cannot read inbox "+ib.Name, err)
		return
	}
	for _, d := range ib.Dead {
		v, err := ib.Inbox.View(ctx, "", d)
		if err != nil {
			c.fail(w, r, http.StatusBadGateway, "Cannot read inbox "+ib.Name, err)
			return
		}
		p.DeadCounts = append(p.DeadCounts, deadCount{Count: v.Dead, Name: d})
	}
	status := http.StatusOK
	if len(ib.Dead) > 0 {
		p.Dead = r.FormValue("dead")
		if !slices.Contains(ib.Dead, p.Dead) {
			p.Dead = ib.Dead[0]
		}
		if err := c.deadRows(ctx, ib, &p); err != nil {
			p.FilterErr, status = err.Error(), http.StatusBadRequest
		}
	}
	c.render(w, r, status, "inbox", page{
		Title: ib.Name, Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {c.path("inboxes", ib.Name), ib.Name}},
	})
}

// deadRows fills in p's page of the rows of p.Dead its filter selects.
func (c *Console) deadRows(ctx context.Context, ib Inbox, p *inboxPage) error {
	f, err := inboxFilter(p.Filter)
	if err != nil {
		return err
	}
	limit := p.Filter.limit(c.pageSize)
	rows, err := ib.Inbox.DeadRows(ctx, p.Dead, f, limit+1)
	if err != nil {
		return err
	}
	if len(rows) > limit {
		rows = rows[:limit]
		p.Next = c.path("inboxes", ib.Name) + "?" + p.Filter.query(rows[limit-1].ID) + "&dead=" + url.QueryEscape(p.Dead)
	}
	if p.Filter.After != "" {
		p.First = c.path("inboxes", ib.Name) + "?" + p.Filter.query("") + "&dead=" + url.QueryEscape(p.Dead)
	}
	p.Rows = rows
	return nil
}

// inboxFilter is the inbox.Filter of the filter box f: After, an integer row id, is
// the cursor (FromID = After + 1).
func inboxFilter(f filterForm) (inbox.Filter, error) {
	since, until, err := f.times()
	if err != nil {
		return inbox.Filter{}, err
	}
	out := inbox.Filter{Error: f.Error, Since: since, Until: until}
	if f.After != "" {
		n, err := strconv.ParseInt(f.After, 10, 64)
		if err != nil {
			return inbox.Filter{}, fmt.Errorf("after %q is not a row id", f.After)
		}
		out.FromID = n + 1
	}
	return out, nil
}

// deadRowPage is one dead row's page.
type deadRowPage struct {
	// Dead is the dead letter it is in.
	Dead string
	// Inbox is its inbox.
	Inbox Inbox
	// Badge names the codec the payload was decoded with and how it is shown.
	Badge string
	// Row is the row, its payload decoded.
	Row *inbox.PeekedRow
}

// deadRowPage serves one row of an inbox's dead letter.
func (c *Console) deadRowPage(w http.ResponseWriter, r *http.Request) {
	ib, ok := c.inbox(r.PathValue("name"))
	dead, id := r.PathValue("dead"), r.PathValue("id")
	if !ok || !slices.Contains(ib.Dead, dead) {
		c.fail(w, r, http.StatusNotFound, "No such dead letter", errNotFound("inbox dead letter", r.PathValue("name")+" "+dead))
		return
	}
	row, err := ib.Inbox.PeekDead(r.Context(), dead, id, c.opts.Codec)
	switch {
	case errors.Is(err, inbox.ErrRowNotFound):
		c.fail(w, r, http.StatusNotFound, "No such row", err)
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, "Cannot read row "+id, err)
		return
	}
	back := c.path("inboxes", ib.Name) + "?dead=" + dead
	c.render(w, r, http.StatusOK, "deadrow", page{
		Title: "Dead row " + id, Data: deadRowPage{Badge: c.badge(row.Format, row.DecodeError), Dead: dead, Inbox: ib, Row: row},
		Crumbs: []crumb{{c.path(), "Overview"}, {back, ib.Name}, {c.path("inboxes", ib.Name, "dead", dead, id), id}},
	})
}
