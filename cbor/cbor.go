// Package cbor is a settle.Codec for CBOR (RFC 8949), beside settle's msgpack, JSON and
// raw codecs. It lives in a module of its own so that settle's module does not require
// a CBOR library.
//
// Encoding is deterministic (RFC 8949 section 4.2.1, Core Deterministic Encoding): map
// keys sorted, shortest forms, no indefinite lengths, so one value always has one
// encoding, which retries, dead letters and replies keep byte for byte.
//
//	app.Mount(src, settle.Typed(charge), settle.WithCodec(cbor.Codec))
package cbor

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"

	"github.com/settlekit/settle"
)

// Codec encodes with github.com/fxamacker/cbor/v2 in Core Deterministic Encoding and
// decodes any well-formed CBOR, refusing duplicate map keys. It is safe for concurrent
// use.
var Codec settle.Codec = newCodec()

type codec struct {
	dec cbor.DecMode
	enc cbor.EncMode
}

func newCodec() codec {
	enc, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(fmt.Sprintf("cbor: core deterministic encoding options: %v", err))
	}
	dec, err := cbor.DecOptions{DupMapKey: cbor.DupMapKeyEnforcedAPF}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("cbor: decoding options: %v", err))
	}
	return codec{dec: dec, enc: enc}
}

func (c codec) Marshal(v any) ([]byte, error)      { return c.enc.Marshal(v) }
func (c codec) Name() string                       { return "cbor" }
func (c codec) Unmarshal(data []byte, v any) error { return c.dec.Unmarshal(data, v) }
