package wire

import (
	"bytes"
	"maps"
	"reflect"
	"testing"
	"unsafe"
)

func TestStreamValuesLayout(t *testing.T) {
	t.Parallel()

	got := StreamValues([]byte("body"), map[string]string{"zeta": "z", "alpha": "a", "mid": "m"})
	want := []any{FieldPayload, []byte("body"), "alpha", "a", "mid", "m", "zeta", "z"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want the payload field first, then headers sorted: %q", got, want)
	}
}

func TestStreamValuesNilPayloadWritesNoPayloadField(t *testing.T) {
	t.Parallel()

	got := StreamValues(nil, map[string]string{"kind": "foreign"})
	if want := []any{"kind", "foreign"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestStreamValuesEmptyPayloadWritesEmptyField(t *testing.T) {
	t.Parallel()

	got := StreamValues([]byte{}, nil)
	if want := []any{FieldPayload, []byte{}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestStreamValuesSkipsHeaderNamedPayload(t *testing.T) {
	t.Parallel()

	got := StreamValues([]byte("p"), map[string]string{FieldPayload: "impostor", "h": "v"})
	if want := []any{FieldPayload, []byte("p"), "h", "v"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q: a header must never overwrite the payload", got, want)
	}
}

func TestFromStreamReadsSettleEntry(t *testing.T) {
	t.Parallel()

	payload, ok, headers := FromStream(map[string]any{FieldPayload: "body", "trace": "abc", "settle-retry-count": "2"})
	if !ok || string(payload) != "body" {
		t.Fatalf("got payload (%q, %t), want (%q, true)", payload, ok, "body")
	}
	if want := map[string]string{"trace": "abc", "settle-retry-count": "2"}; !maps.Equal(headers, want) {
		t.Fatalf("got headers %v, want %v", headers, want)
	}
}

func TestFromStreamReadsForeignEntryWithoutPayload(t *testing.T) {
	t.Parallel()

	// As redis-cli XADD s * order 42 customer bob would write it.
	payload, ok, headers := FromStream(map[string]any{"order": "42", "customer": "bob"})
	if ok || payload != nil {
		t.Fatalf("got payload (%q, %t), want (nil, false)", payload, ok)
	}
	if want := map[string]string{"order": "42", "customer": "bob"}; !maps.Equal(headers, want) {
		t.Fatalf("got headers %v, want every field as a header: %v", headers, want)
	}
}

func TestFromStreamEmptyPayloadIsNotMissing(t *testing.T) {
	t.Parallel()

	payload, ok, headers := FromStream(map[string]any{FieldPayload: ""})
	if !ok || payload == nil || len(payload) != 0 {
		t.Fatalf("got payload (%#v, %t), want an empty non-nil payload that is present", payload, ok)
	}
	if headers == nil || len(headers) != 0 {
		t.Fatalf("got headers %#v, want empty and non-nil", headers)
	}
}

func TestFromStreamPayloadOnlyEntriesGetHeadersOfTheirOwn(t *testing.T) {
	t.Parallel()

	entry := map[string]any{FieldPayload: "body"}
	payload, ok, first := FromStream(entry)
	if !ok || string(payload) != "body" || first == nil || len(first) != 0 {
		t.Fatalf("got (%q, %t, %#v), want (%q, true, empty headers)", payload, ok, first, "body")
	}
	first["trace"] = "abc" // a handler may write to its message's headers
	if _, _, second := FromStream(entry); len(second) != 0 {
		t.Fatalf("a second entry's headers hold %v written to the first's", second)
	}
}

func TestFromStreamEmptyEntry(t *testing.T) {
	t.Parallel()

	payload, ok, headers := FromStream(map[string]any{})
	if ok || payload != nil || headers == nil || len(headers) != 0 {
		t.Fatalf("got (%#v, %t, %#v), want (nil, false, empty headers)", payload, ok, headers)
	}
}

func TestFromStreamOtherValueTypes(t *testing.T) {
	t.Parallel()

	payload, ok, headers := FromStream(map[string]any{FieldPayload: []byte{0, 0xff}, "nil": nil, "num": 7})
	if !ok || !bytes.Equal(payload, []byte{0, 0xff}) {
		t.Fatalf("got payload (%v, %t), want the bytes kept", payload, ok)
	}
	if headers["nil"] != "" {
		t.Fatalf("got nil field %q, want empty", headers["nil"])
	}
	if headers["num"] != "<unexpected int>" {
		t.Fatalf("got int field %q, want it shown as unexpected", headers["num"])
	}
}

func TestStreamRoundTrip(t *testing.T) {
	t.Parallel()

	payload := []byte("\x00binary\xff")
	headers := map[string]string{"a": "1", "b": ""}
	vals := StreamValues(payload, headers)
	// Redis hands fields back as strings.
	fields := map[string]any{}
	for i := 0; i < len(vals); i += 2 {
		switch v := vals[i+1].(type) {
		case []byte:
			fields[vals[i].(string)] = string(v)
		default:
			fields[vals[i].(string)] = v
		}
	}
	gotPayload, ok, gotHeaders := FromStream(fields)
	if !ok || !bytes.Equal(gotPayload, payload) || !maps.Equal(gotHeaders, headers) {
		t.Fatalf("got (%q, %t, %v), want (%q, true, %v)", gotPayload, ok, gotHeaders, payload, headers)
	}
}

// A read's payload is its value's own bytes (go-redis reads each string into a buffer of
// its own), not a copy; FromStream, for values of any origin, copies.
func TestFromReadPayloadIsTheReadValuesOwnBytes(t *testing.T) {
	v := string([]byte("a payload of a read")) // a buffer of its own, as go-redis reads it
	read, ok, _ := FromRead(map[string]any{FieldPayload: v})
	if !ok || string(read) != v || unsafe.SliceData(read) != unsafe.StringData(v) {
		t.Fatalf("FromRead payload %q at %p, want the value's own bytes at %p", read, unsafe.SliceData(read), unsafe.StringData(v))
	}
	copied, _, _ := FromStream(map[string]any{FieldPayload: v})
	if string(copied) != v || unsafe.SliceData(copied) == unsafe.StringData(v) {
		t.Fatalf("FromStream payload %q shares the value's bytes, want a copy", copied)
	}
}

// A payload of one byte is copied: Go may give a one-byte string static storage, which
// a handler writing into its payload must not reach.
func TestFromReadCopiesAOneBytePayload(t *testing.T) {
	v := "x"
	read, _, _ := FromRead(map[string]any{FieldPayload: v, "h": "1"})
	if string(read) != v || unsafe.SliceData(read) == unsafe.StringData(v) {
		t.Fatalf("FromRead of a one-byte payload shares its bytes, want a copy")
	}
}
