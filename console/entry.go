package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// entryPage is the page of one pending entry or one parked member: where it is, its
// payload decoded, its headers, and the actions on it.
type entryPage struct {
	// Attempts is its retry count header.
	Attempts string
	// Badge names the codec the payload was decoded with and how it is shown.
	Badge string
	// Base is the mount page's path, which the forms start with.
	Base string
	// Cut reports that the payload shown is its first CutAt bytes of Size.
	Cut bool
	// CutAt is how many bytes of a field a page shows (admin.PageCut).
	CutAt int
	// DecodeError says why the payload did not decode ("" when it did).
	DecodeError string
	// Due is when a parked member is due.
	Due time.Time
	// DueIn is how long until then (negative: overdue).
	DueIn time.Duration
	// Handle names a parked member (for Promote).
	Handle string
	// Headers are its headers, by name.
	Headers []header
	// ID is a pending entry's id.
	ID string
	// LastError is the last error recorded on it ("" when settle recorded none: it
	// writes the last error on the dead letter only).
	LastError string
	// Mount is the mount it belongs to.
	Mount Mount
	// OriginID is its message's origin id, for the search.
	OriginID string
	// Pending is a pending entry's state.
	Pending *admin.PendingEntry
	// Shown is the payload, decoded.
	Shown string
	// Size is the payload's size in bytes.
	Size int64
}

// show fills in p's payload and headers from payload and headers.
func (c *Console) show(p *entryPage, payload []byte, headers map[string]string) {
	p.Headers, p.Attempts = sortedHeaders(headers), retries(headers)
	p.OriginID, p.LastError = headers[settle.HeaderOriginID], headers[settle.HeaderDeadError]
	var format string
	format, p.Shown, p.DecodeError = admin.Show(payload, c.opts.Codec)
	p.Badge = c.badge(format, p.DecodeError)
}

// pendingPage serves a pending entry of a stream mount: who holds it, for how long,
// its payload, and release or dead-letter it.
func (c *Console) pendingPage(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok || !m.isStream() {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("stream mount", r.PathValue("name")))
		return
	}
	id := r.PathValue("id")
	ctx := r.Context()
	pe, err := c.opts.Admin.Pending(ctx, m.Key, m.Group, id)
	switch {
	case errors.Is(err, admin.ErrNotPending):
		c.fail(w, r, http.StatusNotFound, "Not pending", err)
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, "Cannot read entry "+id, err)
		return
	}
	peek, err := c.opts.Admin.PeekCut(ctx, m.Key, id, c.opts.Codec)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, "Cannot read entry "+id, err)
		return
	}
	p := entryPage{Base: c.path("mounts", m.Name), CutAt: admin.PageCut, ID: id, Mount: m, Pending: pe, Cut: peek.Cut, Size: peek.Size}
	c.show(&p, peek.Payload, peek.Headers)
	c.render(w, r, http.StatusOK, "entry", page{
		Title: "Pending entry " + id, Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {p.Base, m.Name}, {c.path("mounts", m.Name, "pending", id), id}},
	})
}

// delayedPage serves a member of a mount's delay set (?member=handle): when it is due,
// its payload, and promote it.
func (c *Console) delayedPage(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok || m.Delayed == "" {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("mount with a delay set", r.PathValue("name")))
		return
	}
	handle := r.FormValue("member")
	ctx := r.Context()
	d, err := c.opts.Admin.DelayedMember(ctx, m.Delayed, handle)
	switch {
	case errors.Is(err, admin.ErrMemberNotFound):
		c.fail(w, r, http.StatusNotFound, "Not in the delay set", err)
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, "Cannot read the delay set of "+m.Name, err)
		return
	}
	info, err := c.opts.Admin.DelaySet(ctx, m.Delayed)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, "Cannot read the delay set of "+m.Name, err)
		return
	}
	p := entryPage{Base: c.path("mounts", m.Name), CutAt: admin.PageCut, Due: d.Due, DueIn: d.Due.Sub(info.Now), Handle: d.Handle, Mount: m, Size: int64(len(d.Payload))}
	payload := d.Payload
	if len(payload) > admin.PageCut {
		payload, p.Cut = payload[:admin.PageCut], true
	}
	c.show(&p, payload, d.Headers)
	c.render(w, r, http.StatusOK, "entry", page{
		Title: "Parked retry " + d.Handle, Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {p.Base, m.Name}, {c.path("mounts", m.Name, "delayed") + "?member=" + d.Handle, d.Handle}},
	})
}
