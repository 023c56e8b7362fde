// Package wire owns settle's two wire formats: a stream entry (one field per header plus
// the payload field) and the envelope that lists and channels carry (msgpack headers +
// payload). Nothing else in settle knows how a message is laid out in Redis.
package wire

import (
	"slices"
	"strings"
	"unsafe"
)

// FieldPayload is the stream entry field that holds the payload. Every other field of an
// entry is a header.
const FieldPayload = "payload"

// StreamValues lays out payload and headers as XADD field/value pairs: the payload field
// first, then the headers sorted by name so that equal messages make equal entries. A nil
// payload writes no payload field (a copy of a foreign entry that had none); an empty,
// non-nil one writes an empty field.
func StreamValues(payload []byte, headers map[string]string) []any {
	return AppendStreamValues(make([]any, 0, 2+2*len(headers)), payload, headers)
}

// AppendStreamValues appends StreamValues(payload, headers) to dst: a batch of moves
// lays out all its entries in one slice.
func AppendStreamValues(dst []any, payload []byte, headers map[string]string) []any {
	type pair struct{ k, v string }
	var buf [8]pair // a few headers need no allocation
	pairs := buf[:0]
	for k, v := range headers {
		if k != FieldPayload {
			pairs = append(pairs, pair{k, v})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return strings.Compare(a.k, b.k) })
	if payload != nil {
		dst = append(dst, FieldPayload, payload)
	}
	for _, p := range pairs {
		dst = append(dst, boxedName(p.k), p.v)
	}
	return dst
}

// The names of the headers settle writes on every copy, boxed once: a string put in an
// interface is copied to the heap, and a retry's copy names them every time.
var (
	boxedRetryCount any = HeaderRetryCount
	boxedOriginID   any = HeaderOriginID
)

// boxedName returns name as an interface value, without an allocation for settle's own
// copy headers.
func boxedName(name string) any {
	switch name {
	case HeaderRetryCount:
		return boxedRetryCount
	case HeaderOriginID:
		return boxedOriginID
	}
	return name
}

// FromStream reads an entry written by settle or by any other client. The payload field
// becomes the payload (ok reports whether the entry had one; the payload is nil exactly
// when it had none); every other field becomes a header. Field values that are not strings are formatted as Redis would return them.
func FromStream(values map[string]any) (payload []byte, ok bool, headers map[string]string) {
	return fromStream(values, copyBytes)
}

// FromRead is FromStream for the values of a go-redis read, which are nobody else's:
// the payload is its value's own bytes, not a copy of them. go-redis reads each string
// into a buffer of its own (proto.Reader.readStringReply), so the bytes are written by
// no one else, and the map that held the string is dropped after this call; a copy
// per message was a fifth of what a drain allocates beyond the client's reply.
func FromRead(values map[string]any) (payload []byte, ok bool, headers map[string]string) {
	return fromStream(values, ownBytes)
}

func fromStream(values map[string]any, bytes func(string) []byte) (payload []byte, ok bool, headers map[string]string) {
	if v, found := values[FieldPayload]; found && len(values) == 1 {
		// The common entry, a payload and no header: no walk over the fields.
		return bytes(toString(v)), true, map[string]string{}
	}
	headers = make(map[string]string, len(values))
	for k, v := range values {
		s := toString(v)
		if k == FieldPayload {
			payload, ok = bytes(s), true
			continue
		}
		headers[k] = s
	}
	return payload, ok, headers
}

func copyBytes(s string) []byte { return []byte(s) }

// ownBytes returns s's bytes themselves. Below two bytes it copies: Go may give a
// string of one byte static storage, which must never be written.
func ownBytes(s string) []byte {
	if len(s) < 2 {
		return []byte(s)
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	default:
		// go-redis decodes every stream field value as a string; anything else would be a
		// change in the client, shown rather than hidden.
		return "<unexpected " + typeName(v) + ">"
	}
}

// MaxStreamFields is the most field/value pairs a stream entry may have for settle's
// scripts to write it (a retry copy, a parked copy swept back, a dead letter, a replay):
// Lua hands one redis.call only so many values (7,998 on Redis 7.0; about 5,100 on
// miniredis, which the test kit runs on), and an XADD takes a few of its own. An entry
// read with more cannot be written by a script; the Publisher refuses a message that
// would come near it (settle.MaxHeaders).
const MaxStreamFields = 2000
