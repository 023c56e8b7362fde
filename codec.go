package settle

import (
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Codec turns values into payload bytes and back. Msgpack is the default; JSON and Raw
// are the alternatives. A Codec must be safe for concurrent use.
type Codec interface {
	// Marshal encodes v.
	Marshal(v any) ([]byte, error)
	// Name names the codec in errors and logs.
	Name() string
	// Unmarshal decodes data into v, a pointer.
	Unmarshal(data []byte, v any) error
}

var (
	// Msgpack encodes with github.com/vmihailenco/msgpack/v5. It is the default codec.
	Msgpack Codec = msgpackCodec{}
	// JSON encodes with encoding/json.
	JSON Codec = jsonCodec{}
	// Raw passes bytes through: it marshals []byte and string and unmarshals into
	// *[]byte and *string.
	Raw Codec = rawCodec{}
)

type msgpackCodec struct{}

func (msgpackCodec) Marshal(v any) ([]byte, error)      { return msgpack.Marshal(v) }
func (msgpackCodec) Name() string                       { return "msgpack" }
func (msgpackCodec) Unmarshal(data []byte, v any) error { return msgpack.Unmarshal(data, v) }

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Name() string                       { return "json" }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	default:
		return nil, fmt.Errorf("raw codec marshals []byte and string, not %T", v)
	}
}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Unmarshal(data []byte, v any) error {
	switch v := v.(type) {
	case *[]byte:
		*v = append((*v)[:0], data...)
		return nil
	case *string:
		*v = string(data)
		return nil
	default:
		return fmt.Errorf("raw codec unmarshals into *[]byte and *string, not %T", v)
	}
}
