package console

import (
	"net/http"
	"net/url"
	"time"

	"github.com/settlekit/settle/admin"
)

// findPage answers the search box: where each copy of a message is.
type findPage struct {
	// Err says why the search was refused ("" when it was not).
	Err string
	// Found is the answer (nil before a search).
	Found *admin.Found
	// Places are the places found, each with its page.
	Places []foundPlace
	// Q, Since and Until are the search box as the request filled it.
	Q, Since, Until string
}

// foundPlace is one place of a message, with the page that shows it.
type foundPlace struct {
	admin.Place
	// DueIn is how long until a delayed copy is due (negative: overdue).
	DueIn time.Duration
	// Href is the page of the place ("" when it has none).
	Href string
}

// find serves the search: a stream id, an origin id or a header name=value, searched
// in every Redis mount within the range the box gives (bounded by admin.DefaultFindScan
// entries of each key and admin.DefaultFindLimit places).
func (c *Console) find(w http.ResponseWriter, r *http.Request) {
	p := findPage{Q: r.FormValue("q"), Since: r.FormValue("since"), Until: r.FormValue("until")}
	status := http.StatusOK
	if p.Q != "" {
		if err := c.search(r, &p); err != nil {
			p.Err, status = err.Error(), http.StatusBadRequest
		}
	}
	c.render(w, r, status, "find", page{Title: "Find a message", Data: p, Crumbs: []crumb{{c.path(), "Overview"}, {c.path("find"), "Find"}}})
}

// search runs the search p's box asks for and fills in its answer.
func (c *Console) search(r *http.Request, p *findPage) error {
	q, err := admin.ParseFindQuery(p.Q)
	if err != nil {
		return err
	}
	if q.Since, q.Until, err = (filterForm{Since: p.Since, Until: p.Until}).times(); err != nil {
		return err
	}
	var scopes []admin.FindScope
	for _, m := range c.mounts {
		s := admin.FindScope{Mount: m.Name, Delayed: m.Delayed, Replies: m.Replies}
		if m.isStream() {
			s.Stream, s.Group, s.DeadLetter = m.Key, m.Group, m.DeadLetter
		} else {
			s.List, s.DeadLetterList = m.Key, m.DeadLetter
		}
		scopes = append(scopes, s)
	}
	if p.Found, err = c.opts.Admin.Find(r.Context(), scopes, q); err != nil {
		return err
	}
	for _, pl := range p.Found.Places {
		fp := foundPlace{Place: pl, Href: c.placeHref(pl)}
		if !pl.Due.IsZero() {
			fp.DueIn = pl.Due.Sub(p.Found.Now)
		}
		p.Places = append(p.Places, fp)
	}
	return nil
}

// placeHref is the page that shows pl: a dead letter's, a pending entry's, a parked
// member's, else its mount's.
func (c *Console) placeHref(pl admin.Place) string {
	if pl.Mount == "" {
		return ""
	}
	switch pl.Kind {
	case admin.PlaceDead:
		return c.path("mounts", pl.Mount, "dead", pl.ID)
	case admin.PlacePending:
		return c.path("mounts", pl.Mount, "pending", pl.ID)
	case admin.PlaceDelayed:
		return c.path("mounts", pl.Mount, "delayed") + "?member=" + url.QueryEscape(pl.ID)
	}
	return c.path("mounts", pl.Mount)
}
