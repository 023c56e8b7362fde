package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/show"
)

// Entry is one stream entry as settle reads it: the payload field and a header per
// other field.
type Entry struct {
	// HasPayload reports whether the entry has a payload field (an entry written by
	// another client may not).
	HasPayload bool
	// Headers are the entry's other fields, settle's own (settle.HeaderPrefix) included.
	Headers map[string]string
	// ID is the entry's id.
	ID string
	// Key is the stream's key.
	Key string
	// Cut reports that a listing read only the first PageCut bytes of the payload or
	// of a header (see Size).
	Cut bool
	// Payload is the payload field's bytes, as they are stored.
	Payload []byte
	// Size is the payload's length in bytes as stored (a listing may hold only its
	// first PageCut bytes: then Cut).
	Size int64
	// Time is when the entry was added, from its id.
	Time time.Time
}

// Peeked is an entry with its payload shown for a person.
type Peeked struct {
	Entry
	// DecodeError says why the payload did not decode with the codec given ("" when it
	// did); Shown then holds its bytes in hex.
	DecodeError string
	// Format says how Shown shows the payload: "json", "text" or "hex".
	Format string
	// Shown is the payload: as JSON when it decoded with the msgpack or JSON codec (or
	// any codec that decodes into an interface value), as text when the raw codec was
	// given and it is printable UTF-8, else as hex.
	Shown string
}

// Peek returns entry id of the stream key with its payload decoded by codec (nil:
// settle.Msgpack): msgpack and JSON are shown as JSON, raw as text or hex. A payload
// that does not decode is no error: it is shown in hex with DecodeError saying why. A
// missing key, a key that is not a stream, or an id the stream does not have is an
// error naming it.
func (i *Inspector) Peek(ctx context.Context, key, id string, codec settle.Codec) (*Peeked, error) {
	if err := i.mustBe(ctx, key, "stream", "stream", false); err != nil {
		return nil, err
	}
	msgs, err := i.rdb.XRange(ctx, key, id, id).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q: entry %q: %w", key, id, err)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: stream %q has no entry %s", ErrEntryNotFound, key, id)
	}
	p := &Peeked{Entry: entryOf(key, msgs[0])}
	p.Format, p.Shown, p.DecodeError = Show(p.Payload, codec)
	return p, nil
}

// Show renders payload for a person as Peek does, returning the format ("json", "text"
// or "hex"), the text, and why it did not decode with codec ("" when it did).
func Show(payload []byte, codec settle.Codec) (format, shown, decodeErr string) {
	return show.Payload(payload, codec)
}

// PeekCut is Peek with each field read cut to PageCut bytes in Redis, as a listing
// reads them: Entry.Cut says whether anything was cut and Entry.Size how large the
// payload is (Inspector.PayloadChunk reads the whole). A page showing one entry costs
// O(PageCut) whatever the entry holds.
func (i *Inspector) PeekCut(ctx context.Context, key, id string, codec settle.Codec) (*Peeked, error) {
	if err := i.mustBe(ctx, key, "stream", "stream", false); err != nil {
		return nil, err
	}
	ces, err := i.xrangeCut(ctx, key, id, id, 1, PageCut, false)
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q: entry %q: %w", key, id, err)
	}
	if len(ces) == 0 {
		return nil, fmt.Errorf("%w: stream %q has no entry %s", ErrEntryNotFound, key, id)
	}
	p := &Peeked{Entry: deadLetterOf(key, ces[0]).Entry}
	p.Format, p.Shown, p.DecodeError = Show(p.Payload, codec)
	return p, nil
}
