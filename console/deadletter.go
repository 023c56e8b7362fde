package console

import (
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// deadLetterPage is one dead letter's page.
type deadLetterPage struct {
	// Attempts is its retry count header.
	Attempts string
	// Base is the mount page's path, which the forms start with.
	Base string
	// CutAt is how many bytes of a field a page shows (admin.PageCut).
	CutAt int
	// DeadAt is when it was dead-lettered.
	DeadAt time.Time
	// DecodeError says why the payload did not decode ("" when it did).
	DecodeError string
	// DL is the dead letter.
	DL admin.DeadLetter
	// Badge names the codec the payload was decoded with and how it is shown.
	Badge string
	// Format is how Shown shows the payload: "json", "text" or "hex".
	Format string
	// Headers are its headers, by name.
	Headers []header
	// Mount is the mount it belongs to.
	Mount Mount
	// Shown is the payload, decoded.
	Shown string
}

// header is one header of an entry.
type header struct{ Name, Value string }

// sortedHeaders returns h by name.
func sortedHeaders(h map[string]string) []header {
	out := make([]header, 0, len(h))
	for k, v := range h {
		out = append(out, header{k, v})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// deadLetterPage serves a dead letter of a Redis mount: its headers, its payload
// decoded and its history.
func (c *Console) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok || m.DeadLetter == "" {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("mount with dead letters", r.PathValue("name")))
		return
	}
	id := r.PathValue("id")
	dls, err := c.deadLetters(m).Page(r.Context(), admin.Filter{IDs: []string{id}}, 1)
	switch {
	case errors.Is(err, admin.ErrEntryNotFound) || err == nil && len(dls) == 0:
		c.fail(w, r, http.StatusNotFound, "No such dead letter", errNotFound("dead letter", id))
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, "Cannot read dead letter "+id, err)
		return
	}
	d := dls[0]
	p := deadLetterPage{Base: c.path("mounts", m.Name), CutAt: admin.PageCut, DL: d, Mount: m, Headers: sortedHeaders(d.Headers), Attempts: retries(d.Headers), DeadAt: d.Time}
	if at, err := time.Parse(time.RFC3339Nano, d.Headers[settle.HeaderDeadAt]); err == nil {
		p.DeadAt = at
	}
	p.Format, p.Shown, p.DecodeError = admin.Show(d.Payload, c.opts.Codec)
	p.Badge = c.badge(p.Format, p.DecodeError)
	c.render(w, r, http.StatusOK, "deadletter", page{
		Title: "Dead letter " + id, Data: p,
		Crumbs: []crumb{{c.path(), "Overview"}, {c.path("mounts", m.Name), m.Name}, {c.path("mounts", m.Name, "dead", id), id}},
	})
}

// payloadChunk is how much of a payload one read of a download takes.
const payloadChunk = 1 << 20

// payloadDownload serves the whole payload of a dead letter of a Redis mount stream,
// read in pieces of payloadChunk (a payload of any size, in bounded memory).
func (c *Console) payloadDownload(w http.ResponseWriter, r *http.Request) {
	m, ok := c.mount(r.PathValue("name"))
	if !ok || m.DeadLetter == "" || !m.isStream() {
		c.fail(w, r, http.StatusNotFound, "No such mount", errNotFound("mount with a dead-letter stream", r.PathValue("name")))
		return
	}
	id := r.PathValue("id")
	piece, size, err := c.opts.Admin.PayloadChunk(r.Context(), m.DeadLetter, id, 0, payloadChunk)
	switch {
	case errors.Is(err, admin.ErrEntryNotFound):
		c.fail(w, r, http.StatusNotFound, "No such dead letter", errNotFound("dead letter", id))
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, "Cannot read dead letter "+id, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Content-Disposition", `attachment; filename="payload-`+strings.ReplaceAll(id, `"`, "")+`.bin"`)
	for off := int64(0); ; {
		if _, err := w.Write(piece); err != nil {
			return
		}
		off += int64(len(piece))
		if off >= size || len(piece) == 0 {
			return
		}
		if piece, _, err = c.opts.Admin.PayloadChunk(r.Context(), m.DeadLetter, id, off, payloadChunk); err != nil {
			c.log.Warn("settle console: payload download stopped", "mount", m.Name, "id", id, "at", off, "err", err)
			return
		}
	}
}

// badge names the codec a payload shown as format was decoded with: "msgpack, shown as
// JSON", "json", "raw text", or "hex: not msgpack" when it did not decode.
func (c *Console) badge(format, decodeErr string) string {
	codec := c.opts.Codec
	if codec == nil {
		codec = settle.Msgpack
	}
	name := codec.Name()
	switch {
	case decodeErr != "":
		return "hex: not " + name
	case format == "json" && name != "json":
		return name + ", shown as JSON"
	case format == "json":
		return "json"
	}
	return name + ", shown as " + format
}
