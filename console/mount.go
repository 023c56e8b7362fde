package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// mountPage is a Redis mount's page: its consumers, its delay set and one page of its
// dead letters.
type mountPage struct {
	// Base is the mount page's path, which its forms and links start with.
	Base string
	// Charts are its last hour, drawn (none before the first sample), or the range
	// Prometheus drew.
	Charts []chart
	// ChartHead says where they come from.
	ChartHead chartHead
	// Dead is the page of dead letters the filter selects.
	Dead []admin.DeadLetter
	// Delay is its delay set (nil: none).
	Delay *admin.DelaySetInfo
	// Filter is the filter box as the request filled it.
	Filter filterForm
	// FilterErr says why the filter was refused ("" when it was not).
	FilterErr string
	// First is the query of the first page ("" on the first page).
	First string
	// Limits are the states of its flow limits (Mount.Limits); LimitsErr says why they
	// could not be read ("" when they were).
	Limits    []admin.LimitState
	LimitsErr string
	// List is its list (a list kind).
	List *admin.ReliableListInfo
	// Members are a page of the members of its delay set, earliest due (so overdue)
	// first, from MembersFrom.
	Members []member
	// MembersFrom is the position of the first member shown (0: the earliest due).
	MembersFrom int64
	// MembersShown says which members the page shows: "51–100 of 3,000".
	MembersShown string
	// MembersNext and MembersPrev are the queries of the next and the previous page of
	// members ("" where there is none).
	MembersNext, MembersPrev string
	// Problems say what needs an operator on this mount, first on its page.
	Problems []string
	// DeadConsumers are the consumers holding entries past the reclaim bound.
	DeadConsumers []admin.ConsumerInfo
	// Mount is the mount.
	Mount Mount
	// Next is the query of the next page ("" on the last).
	Next string
	// Paused reports that its mounts are paused.
	Paused bool
	// MoreConsumers is how many consumers the page does not list (at most a page is).
	MoreConsumers int
	// PendingEntries are a page of its group's pending entries (a stream kind).
	PendingEntries []admin.PendingEntry
	// PendingNext is the query of the next page of pending entries ("" on the last).
	PendingNext string
	// Scanned is, for a page cut short by admin.PageScan, how many entries it read.
	Scanned int
	// Stream is its stream and group (a stream kind).
	Stream *admin.StreamInfo
	// Summary counts and groups the dead letters the filter selects (nil: no dead letter).
	Summary *admin.DeadLetterSummary
}

// member is one delayed retry of a delay set.
type member struct {
	// Attempts is its retry count header.
	Attempts string
	// Due is when it is due.
	Due time.Time
	// Handle names it for Promote.
	Handle string
	// Href is its page.
	Href string
	// Overdue reports that it is due and not yet swept back.
	Overdue bool
}

// mountPage serves a Redis mount's page.
func (c *Console) mountPage(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("mount", r.PathValue("name")))
		return
	}
	ctx := r.Context()
	p := mountPage{Base: c.path("mounts", m.Name), Mount: m, Filter: readFilter(r)}
	var err error
	if m.isStream() {
		if p.Stream, err = c.opts.Admin.Stream(ctx, m.Key, m.Group, admin.ReclaimIdle(m.ReclaimIdle)); err == nil {
			p.Paused = p.Stream.Paused
			if n := len(p.Stream.Consumers); n > c.pageSize {
				// The dead first, so a page never hides one.
				sort.SliceStable(p.Stream.Consumers, func(a, b int) bool { return p.Stream.Consumers[a].Dead && !p.Stream.Consumers[b].Dead })
				p.MoreConsumers, p.Stream.Consumers = n-c.pageSize, p.Stream.Consumers[:c.pageSize]
			}
			p.PendingEntries, err = c.opts.Admin.PendingEntries(ctx, m.Key, m.Group, admin.PendingFilter{After: r.FormValue("pafter")}, c.pageSize)
			if n := len(p.PendingEntries); err == nil && n == c.pageSize {
				p.PendingNext = c.path("mounts", m.Name) + "?pafter=" + url.QueryEscape(p.PendingEntries[n-1].ID)
			}
		}
	} else if p.List, err = c.list(ctx, m); err == nil {
		p.Paused, err = c.opts.Admin.Paused(ctx, m.Key, "")
	}
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, "Cannot read mount "+m.Name, err)
		return
	}
	if m.Delayed != "" {
		if p.Delay, err = c.opts.Admin.DelaySet(ctx, m.Delayed); err != nil {
			c.fail(w, r, http.StatusBadGateway, "Cannot read the delay set of "+m.Name, err)
			return
		}
		from, _ := strconv.ParseInt(r.FormValue("dfrom"), 10, 64)
		from = max(from, 0)
		members, err := c.opts.Admin.DelayedPage(ctx, m.Delayed, from, int64(c.pageSize))
		if err != nil {
			c.fail(w, r, http.StatusBadGateway, "Cannot read the delay set of "+m.Name, err)
			return
		}
		p.MembersFrom = from
		p.MembersShown = "0 of " + showNumber(p.Delay.Size)
		if len(members) > 0 {
			p.MembersShown = fmt.Sprintf("%s–%s of %s", showNumber(from+1), showNumber(from+int64(len(members))), showNumber(p.Delay.Size))
		}
		if next := from + int64(len(members)); next < p.Delay.Size {
			p.MembersNext = p.Base + "?dfrom=" + strconv.FormatInt(next, 10) + "#delay-h"
		}
		if from > 0 {
			p.MembersPrev = p.Base + "?dfrom=" + strconv.FormatInt(max(from-int64(c.pageSize), 0), 10) + "#delay-h"
		}
		for _, dm := range members {
			p.Members = append(p.Members, member{
				Attempts: dm.Headers[settle.HeaderRetryCount], Due: dm.Due, Handle: dm.Handle,
				Href: p.Base + "/delayed?member=" + url.QueryEscape(dm.Handle), Overdue: !dm.Due.After(p.Delay.Now),
			})
		}
	}
	if len(m.Limits) > 0 {
		if p.Limits, err = c.opts.Admin.Limits(ctx, m.Key, m.Group, m.Limits, admin.LimitsOptions{}); err != nil {
			p.LimitsErr = err.Error()
		}
	}
	p.problems(m)
	p.Charts = c.chartsOf(r, "mount:"+m.Name, m.Name, "m", &p.ChartHead)
	c.ranges(&p.ChartHead, p.Base)
	if n, over := c.deadGrowth("mount:" + m.Name); n > 0 {
		p.Problems = append(p.Problems, fmt.Sprintf("the dead letter grew by %d in the last %s", n, showDuration(over)))
	}
	status := http.StatusOK
	if m.DeadLetter != "" {
		if err := c.deadPage(r, m, &p); err != nil {
			p.FilterErr, status = err.Error(), http.StatusBadRequest
		}
	}
	c.render(w, r, status, "mount", page{
		Title: m.Name, Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {c.path("mounts", m.Name), m.Name}},
	})
}

// deadPage fills in p's summary and page of the dead letters of m the filter selects,
// or says why the filter is refused.
func (c *Console) deadPage(r *http.Request, m Mount, p *mountPage) error {
	f, err := adminFilter(p.Filter)
	if err != nil {
		return err
	}
	st := c.deadLetters(m)
	after := f.After
	f.After = ""
	p.Summary, err = st.Summary(r.Context(), f, admin.DefaultSample)
	switch {
	case errors.Is(err, admin.ErrKeyNotFound): // no dead letter yet
		p.Summary = &admin.DeadLetterSummary{Key: m.DeadLetter}
		return nil
	case err != nil:
		return err
	}
	f.After = after
	limit := p.Filter.limit(c.pageSize)
	dls, err := st.Page(r.Context(), f, limit+1)
	var bound *admin.ScanBoundError
	switch {
	case errors.As(err, &bound): // a filter matching few: a short page, and read on
		p.Scanned = bound.Read
		p.Next = c.path("mounts", m.Name) + "?" + p.Filter.query(bound.Next)
	case err != nil:
		return err
	}
	if len(dls) > limit {
		dls = dls[:limit]
		p.Next = c.path("mounts", m.Name) + "?" + p.Filter.query(dls[limit-1].ID)
	}
	if after != "" {
		p.First = c.path("mounts", m.Name) + "?" + p.Filter.query("")
	}
	p.Dead = dls
	return nil
}

// problems says what needs an operator on the mount m, as the overview does: dead
// consumers holding entries, an overdue delay set.
func (p *mountPage) problems(m Mount) {
	rw := row{}
	if p.Stream != nil {
		rw.Lag = p.Stream.Lag
		rw.streamState(p.Stream)
		for _, ci := range p.Stream.Consumers {
			if ci.Dead {
				p.DeadConsumers = append(p.DeadConsumers, ci)
			}
		}
	}
	if p.List != nil {
		rw.listState(m, p.List)
	}
	if p.Delay != nil && p.Delay.Overdue > 0 {
		rw.Problems = append(rw.Problems, fmt.Sprintf("%d delayed %s overdue since %s (no read sweeps them back)", p.Delay.Overdue, plural(int(p.Delay.Overdue), "retry", "retries"), showDuration(p.Delay.OldestOverdue)))
	}
	p.Problems = rw.Problems
}

// adminFilter is the admin.Filter of the filter box f.
func adminFilter(f filterForm) (admin.Filter, error) {
	since, until, err := f.times()
	if err != nil {
		return admin.Filter{}, err
	}
	return admin.Filter{After: f.After, Error: f.Error, Reason: f.Reason, Since: since, Until: until}, nil
}

// retries is the retry count header of headers, for a person ("–" without one).
func retries(headers map[string]string) string {
	if n, err := strconv.Atoi(headers[settle.HeaderRetryCount]); err == nil {
		return strconv.Itoa(n)
	}
	return "–"
}
