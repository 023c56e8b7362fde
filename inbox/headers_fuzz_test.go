package inbox

import (
	"context"
	"maps"
	"testing"
)

// FuzzHeadersColumn feeds arbitrary headers column values through the real scan of a
// claim and the row's delivery: a JSON object of strings is delivered as the headers,
// anything else is delivered with no headers and an error, never a panic or a nil map.
func FuzzHeadersColumn(f *testing.F) {
	f.Add(`{"trace":"00-abc-01"}`, uint8(1))
	f.Add(`{"a":"1","b":""}`, uint8(2))
	f.Add(`{"a":1}`, uint8(1))
	f.Add(`not json`, uint8(2))
	f.Add(``, uint8(1))
	f.Add(`null`, uint8(1))
	f.Add(`[]`, uint8(0))

	db := openEcho(f)

	f.Fuzz(func(t *testing.T, text string, kind uint8) {
		v := columnValue(kind, 7, text)
		rows, err := queryClaimed(context.Background(), db, "SELECT ?, ?, ?, ?, ?", []any{int64(1), int64(1), []byte("p"), "lease", v})
		if err != nil || len(rows) != 1 {
			t.Fatalf("scan of headers %#v: %d rows, %v", v, len(rows), err)
		}
		d, derr := rows[0].delivery("jobs")
		if d == nil || d.Headers == nil {
			t.Fatalf("headers %#v: delivery %+v without a headers map", v, d)
		}
		want, werr := decodeHeaders(v)
		if (derr == nil) != (werr == nil) || !maps.Equal(d.Headers, want) {
			t.Fatalf("headers %#v delivered as %v (%v), decoded as %v (%v)", v, d.Headers, derr, want, werr)
		}
		if derr != nil && len(d.Headers) != 0 {
			t.Fatalf("garbled headers %#v delivered as %v, want none", v, d.Headers)
		}
	})
}

func TestHeadersColumnRoundTripsAndNoneIsNull(t *testing.T) {
	t.Parallel()
	if v := encodeHeaders(nil); v != nil {
		t.Fatalf("no headers encode as %#v, want NULL", v)
	}
	in := map[string]string{"trace": "00-abc-01", "tenant": "acme"}
	got, err := decodeHeaders(encodeHeaders(in))
	if err != nil || !maps.Equal(got, in) {
		t.Fatalf("round trip of %v = %v, %v", in, got, err)
	}
	got, err = decodeHeaders([]byte(`{"a":1}`))
	if err == nil || got == nil || len(got) != 0 {
		t.Fatalf("a non-string value decoded as %v, %v; want no headers and an error", got, err)
	}
}
