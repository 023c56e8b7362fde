// Package show renders a payload for a person: the peeks of settle/admin (stream
// entries) and of settle/inbox (table rows) share it.
package show

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/settlekit/settle"
)

// Payload renders payload for a person, returning the format ("json", "text" or
// "hex"), the text, and why it did not decode with codec ("" when it did; nil codec:
// settle.Msgpack): msgpack and JSON as JSON (or any codec that decodes into an
// interface value), raw as text when it is printable UTF-8, else as hex.
func Payload(payload []byte, codec settle.Codec) (format, shown, decodeErr string) {
	if codec == nil {
		codec = settle.Msgpack
	}
	switch codec {
	case settle.Raw:
		if utf8.Valid(payload) && printable(payload) {
			return "text", string(payload), ""
		}
		return "hex", hex.EncodeToString(payload), ""
	case settle.JSON:
		var b bytes.Buffer
		if err := json.Compact(&b, payload); err != nil {
			return "hex", hex.EncodeToString(payload), fmt.Sprintf("json: %v", err)
		}
		return "json", b.String(), ""
	}
	var v any
	if err := codec.Unmarshal(payload, &v); err != nil {
		return "hex", hex.EncodeToString(payload), fmt.Sprintf("%s: %v", codec.Name(), err)
	}
	b, err := json.Marshal(jsonable(v))
	if err != nil {
		return "hex", hex.EncodeToString(payload), fmt.Sprintf("%s: as JSON: %v", codec.Name(), err)
	}
	return "json", string(b), ""
}

// jsonable makes a decoded value JSON-encodable: maps with keys of any type get string
// keys, byte strings that are UTF-8 become strings.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
		return v
	case []byte:
		if utf8.Valid(v) {
			return string(v)
		}
		return v
	}
	return v
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
