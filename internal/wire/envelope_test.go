package wire

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenEnvelopes pin the envelope encoding: a change of these bytes is a wire format
// change that every list and channel already holding messages would feel.
var goldenEnvelopes = []struct {
	name    string
	payload []byte
	headers map[string]string
}{
	{name: "empty", payload: []byte{}, headers: nil},
	{name: "payload_only", payload: []byte("hello"), headers: nil},
	{name: "headers_sorted", payload: []byte("hello"), headers: map[string]string{"zeta": "z", "alpha": "a", "settle-retry-count": "3"}},
	{name: "binary_payload", payload: []byte{0x00, 0xc1, 0xff, 0x93, 0xa8}, headers: map[string]string{"trace": "t-1"}},
}

func TestEnvelopeGolden(t *testing.T) {
	t.Parallel()

	for _, g := range goldenEnvelopes {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			got := Envelope(g.payload, g.headers)
			path := filepath.Join("testdata", "envelope_"+g.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/wire -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("envelope bytes changed:\ngot  % x\nwant % x", got, want)
			}
			payload, headers, isEnv, err := FromEnvelope(want)
			if err != nil || !isEnv {
				t.Fatalf("FromEnvelope(golden): (%t, %v), want (true, nil)", isEnv, err)
			}
			if !bytes.Equal(payload, g.payload) || !maps.Equal(headers, g.headers) {
				t.Fatalf("FromEnvelope(golden) = (%q, %v), want (%q, %v)", payload, headers, g.payload, g.headers)
			}
		})
	}
}

func TestEnvelopeIsMsgpackTriple(t *testing.T) {
	t.Parallel()

	// Another language reads the envelope with any msgpack library.
	var got []any
	if err := msgpack.Unmarshal(Envelope([]byte("p"), map[string]string{"h": "v"}), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "settle/1" {
		t.Fatalf("got %v, want [settle/1 {h: v} p]", got)
	}
	if h, ok := got[1].(map[string]any); !ok || h["h"] != "v" {
		t.Fatalf("got headers %#v, want map h=v", got[1])
	}
	if p, ok := got[2].([]byte); !ok || string(p) != "p" {
		t.Fatalf("got payload %#v, want bin \"p\"", got[2])
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		payload []byte
		headers map[string]string
		want    []byte
	}{
		{name: "NilPayloadReadsEmpty", payload: nil, headers: map[string]string{"a": "b"}, want: []byte{}},
		{name: "EmptyPayload", payload: []byte{}, headers: nil, want: []byte{}},
		{name: "LargePayload", payload: bytes.Repeat([]byte{0xab}, 70_000), headers: map[string]string{"k": string(bytes.Repeat([]byte("v"), 300))}, want: bytes.Repeat([]byte{0xab}, 70_000)},
		{name: "EmptyHeaderNameAndValue", payload: []byte("x"), headers: map[string]string{"": ""}, want: []byte("x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			payload, headers, isEnv, err := FromEnvelope(Envelope(tt.payload, tt.headers))
			if err != nil || !isEnv {
				t.Fatalf("got (%t, %v), want (true, nil)", isEnv, err)
			}
			if !bytes.Equal(payload, tt.want) || payload == nil {
				t.Fatalf("got payload %#v, want %#v (never nil)", payload, tt.want)
			}
			if !maps.Equal(headers, tt.headers) {
				t.Fatalf("got headers %v, want %v", headers, tt.headers)
			}
		})
	}
}

func TestFromEnvelopeBareValueIsPayload(t *testing.T) {
	t.Parallel()

	for _, v := range [][]byte{
		[]byte(`{"json":"from another client"}`),
		{},
		{0x93, 0xa8}, // starts like an envelope, shorter than its prefix
		[]byte("\x93\xa8settle/2 not ours"),
		mustMsgpack(t, []any{"other", map[string]string{}, []byte("x")}),
	} {
		payload, headers, isEnv, err := FromEnvelope(v)
		if err != nil || isEnv {
			t.Fatalf("FromEnvelope(% x) = (%t, %v), want a bare payload (false, nil)", v, isEnv, err)
		}
		if !bytes.Equal(payload, v) || headers != nil {
			t.Fatalf("FromEnvelope(% x) = (%q, %v), want the value as payload and no headers", v, payload, headers)
		}
	}
}

func TestFromEnvelopeGarbledReturnsErrEnvelope(t *testing.T) {
	t.Parallel()

	valid := Envelope([]byte("payload"), map[string]string{"h1": "v1", "h2": "v2"})
	prefix := len(envelopePrefix)
	tests := []struct {
		name  string
		value []byte
	}{
		{name: "PrefixOnly", value: valid[:prefix]},
		{name: "HeadersNotAMap", value: append(append([]byte{}, envelopePrefix...), 0x01, 0xc4, 0x00)},
		{name: "HeaderNameNotAString", value: append(append([]byte{}, envelopePrefix...), 0x81, 0x01, 0xa1, 'v', 0xc4, 0x00)},
		{name: "HeaderValueNotAString", value: append(append([]byte{}, envelopePrefix...), 0x81, 0xa1, 'k', 0x91, 0x01, 0xc4, 0x00)},
		{name: "PayloadNotBytes", value: append(append([]byte{}, envelopePrefix...), 0x80, 0x92, 0x01, 0x02)},
		{name: "TrailingBytes", value: append(append([]byte{}, valid...), 0x00)},
		{name: "HugeHeaderCount", value: append(append([]byte{}, envelopePrefix...), 0xdf, 0xff, 0xff, 0xff, 0xff)},
		{name: "HugePayloadLength", value: append(append([]byte{}, envelopePrefix...), 0x80, 0xc6, 0xff, 0xff, 0xff, 0xff)},
		{name: "HugeHeaderNameLength", value: append(append([]byte{}, envelopePrefix...), 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff)},
	}
	for i := prefix + 1; i < len(valid); i++ {
		tests = append(tests, struct {
			name  string
			value []byte
		}{name: "TruncatedAt" + strconv.Itoa(i), value: valid[:i]})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			payload, headers, isEnv, err := FromEnvelope(tt.value)
			if !errors.Is(err, ErrEnvelope) {
				t.Fatalf("got err %v, want one wrapping ErrEnvelope", err)
			}
			if !isEnv || payload != nil || headers != nil {
				t.Fatalf("got (%q, %v, %t), want (nil, nil, true)", payload, headers, isEnv)
			}
		})
	}
}

func FuzzFromEnvelope(f *testing.F) {
	for _, g := range goldenEnvelopes {
		f.Add(Envelope(g.payload, g.headers))
	}
	f.Add([]byte{})
	f.Add([]byte("bare"))
	f.Add(envelopePrefix)
	f.Add(append(append([]byte{}, envelopePrefix...), 0xdf, 0xff, 0xff, 0xff, 0xff))
	f.Add(append(append([]byte{}, envelopePrefix...), 0x80, 0xc6, 0xff, 0xff, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, value []byte) {
		payload, headers, isEnv, err := FromEnvelope(value)
		if err != nil {
			if !errors.Is(err, ErrEnvelope) || !isEnv {
				t.Fatalf("error %v (envelope %t) does not wrap ErrEnvelope", err, isEnv)
			}
			return
		}
		if !isEnv {
			if !bytes.Equal(payload, value) || headers != nil {
				t.Fatalf("bare value read as (%q, %v)", payload, headers)
			}
			return
		}
		// Round trip: what was read encodes to an envelope that reads the same.
		p2, h2, isEnv2, err := FromEnvelope(Envelope(payload, headers))
		if err != nil || !isEnv2 || !bytes.Equal(p2, payload) || !maps.Equal(h2, headers) {
			t.Fatalf("round trip of (%q, %v): got (%q, %v, %t, %v)", payload, headers, p2, h2, isEnv2, err)
		}
		// And any payload wraps and unwraps as it is.
		p3, _, _, err := FromEnvelope(Envelope(value, headers))
		if err != nil || !bytes.Equal(p3, value) {
			t.Fatalf("envelope of the raw value: got (%q, %v)", p3, err)
		}
	})
}

func BenchmarkEnvelope(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 256)
	headers := map[string]string{"settle-retry-count": "2", "trace": "0af7651916cd43dd8448eb211c80319c"}
	b.ReportAllocs()
	for b.Loop() {
		_ = Envelope(payload, headers)
	}
}

func BenchmarkFromEnvelope(b *testing.B) {
	value := Envelope(bytes.Repeat([]byte("x"), 256), map[string]string{"settle-retry-count": "2", "trace": "0af7651916cd43dd8448eb211c80319c"})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := FromEnvelope(value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFromEnvelopeBare(b *testing.B) {
	value := bytes.Repeat([]byte("x"), 256)
	b.ReportAllocs()
	for b.Loop() {
		_, _, _, _ = FromEnvelope(value)
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
