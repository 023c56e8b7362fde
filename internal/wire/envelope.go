package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// envelopeTag opens every envelope: a msgpack array of three whose first element is this
// string. A value that does not start with it is a bare payload.
const envelopeTag = "settle/1"

// envelopePrefix is the msgpack encoding of [3-array, envelopeTag].
var envelopePrefix = func() []byte {
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	_ = enc.EncodeArrayLen(3)
	_ = enc.EncodeString(envelopeTag)
	return b.Bytes()
}()

// ErrEnvelope reports a value that starts like an envelope but is not a valid one.
var ErrEnvelope = errors.New("invalid settle envelope")

// Envelope encodes payload and headers as the one value a list item or channel message
// carries: msgpack [ "settle/1", {header: value, … sorted}, payload ].
func Envelope(payload []byte, headers map[string]string) []byte {
	var b bytes.Buffer
	b.Grow(len(envelopePrefix) + len(payload) + 16 + 32*len(headers))
	b.Write(envelopePrefix)
	enc := msgpack.NewEncoder(&b)
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	sort.Strings(names)
	// Errors cannot happen writing into a bytes.Buffer.
	_ = enc.EncodeMapLen(len(names))
	for _, k := range names {
		_ = enc.EncodeString(k)
		_ = enc.EncodeString(headers[k])
	}
	_ = enc.EncodeBytes(payload)
	return b.Bytes()
}

// FromEnvelope decodes a list item or channel message. A value that is not an envelope is
// a bare payload with no headers (isEnvelope false, err nil). A value that starts like an
// envelope but does not decode returns an error wrapping ErrEnvelope.
func FromEnvelope(value []byte) (payload []byte, headers map[string]string, isEnvelope bool, err error) {
	if !bytes.HasPrefix(value, envelopePrefix) {
		return value, nil, false, nil
	}
	r := bytes.NewReader(value[len(envelopePrefix):])
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeMapLen()
	if err != nil {
		return nil, nil, true, fmt.Errorf("%w: headers: %v", ErrEnvelope, err)
	}
	// Each header takes at least two bytes (two empty strings): a longer count is a
	// garbled value, refused before it sizes an allocation.
	if n > r.Len()/2 {
		return nil, nil, true, fmt.Errorf("%w: %d headers announced in %d bytes", ErrEnvelope, n, r.Len())
	}
	if n > 0 {
		headers = make(map[string]string, n)
	}
	for i := 0; i < n; i++ {
		k, err := dec.DecodeString()
		if err != nil {
			return nil, nil, true, fmt.Errorf("%w: header name: %v", ErrEnvelope, err)
		}
		v, err := dec.DecodeString()
		if err != nil {
			return nil, nil, true, fmt.Errorf("%w: header %q: %v", ErrEnvelope, k, err)
		}
		headers[k] = v
	}
	// The payload's length is checked against what is left before anything is allocated
	// (msgpack's DecodeBytes would allocate whatever length a garbled value announces).
	// The decoder reads r directly, unbuffered, because *bytes.Reader is an
	// io.ByteScanner, so the payload bytes are the next ones in r.
	pn, err := dec.DecodeBytesLen()
	if err != nil {
		return nil, nil, true, fmt.Errorf("%w: payload: %v", ErrEnvelope, err)
	}
	if pn > r.Len() {
		return nil, nil, true, fmt.Errorf("%w: payload of %d bytes announced, %d left", ErrEnvelope, pn, r.Len())
	}
	payload = []byte{}
	if pn > 0 {
		payload = make([]byte, pn)
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil, nil, true, fmt.Errorf("%w: payload: %v", ErrEnvelope, err)
		}
	}
	if r.Len() > 0 {
		return nil, nil, true, fmt.Errorf("%w: %d trailing bytes", ErrEnvelope, r.Len())
	}
	return payload, headers, true, nil
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
