package settle

import (
	"bytes"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/settlekit/settle/internal/wire"
)

// FuzzParseRetryCount proves the retry-count header parse never panics, reads a header
// only as an integer from 0 to MaxRetryCount (a larger one is MaxRetryCount, anything
// else 0, both not ok), so an attempt (count + 1) is always positive, and that every
// count up to the bound written by withRetryCount reads back as itself.
func FuzzParseRetryCount(f *testing.F) {
	for _, s := range []string{"0", "4", " 2 ", "", "two", "-3", "1.5", "+7", "007", "99999999999999999999999", "9223372036854775807", "\x00"} {
		f.Add(s, 3)
	}
	f.Add("1", -1)
	f.Add("1", 1<<62)
	f.Fuzz(func(t *testing.T, v string, n int) {
		got, ok := parseRetryCount(map[string]string{HeaderRetryCount: v})
		if got < 0 || got > MaxRetryCount || got+1 <= 0 {
			t.Fatalf("parseRetryCount(%q) = %d: outside 0..MaxRetryCount", v, got)
		}
		want, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(strings.TrimSpace(v), "-") || err == nil && want > MaxRetryCount:
			if got != MaxRetryCount || ok {
				t.Fatalf("parseRetryCount(%q) = (%d, %t), want (MaxRetryCount, false)", v, got, ok)
			}
		case err != nil || want < 0:
			if got != 0 || ok {
				t.Fatalf("parseRetryCount(%q) = (%d, %t), want (0, false)", v, got, ok)
			}
		case got != want || !ok:
			t.Fatalf("parseRetryCount(%q) = (%d, %t), want (%d, true)", v, got, ok, want)
		}
		if n < 0 || n > MaxRetryCount {
			return
		}
		h := withRetryCount(map[string]string{HeaderRetryCount: v, "trace": v}, n)
		if got, ok := parseRetryCount(h); got != n || !ok {
			t.Fatalf("withRetryCount(%d) reads back as (%d, %t)", n, got, ok)
		}
		if h["trace"] != v {
			t.Fatalf("withRetryCount lost another header: %v", h)
		}
	})
}

// FuzzStreamEntry proves that reading any stream entry (fields as another client may
// write them, with or without a payload field, any retry-count value) never panics, that
// the entry's layout through wire.StreamValues reads back the same, and that a retry
// copy of it counts one higher.
//
// Fields are given as one string: NUL-separated name/value pairs.
func FuzzStreamEntry(f *testing.F) {
	f.Add([]byte("body"), true, "2", true, "trace\x00abc")
	f.Add([]byte(nil), false, "", false, "order\x0042\x00customer\x00bob")
	f.Add([]byte{}, true, "garbled", true, "")
	f.Add([]byte{0x00, 0xff, '\n'}, true, "-1", true, "payload\x00impostor")
	f.Add([]byte("x"), true, " 3 ", true, "settle-retry-count\x009\x00\x00")
	f.Add([]byte("x"), false, "99999999999999999999", true, "a\x00b\x00c")
	f.Fuzz(func(t *testing.T, payload []byte, withPayload bool, retry string, withRetry bool, fields string) {
		values := map[string]any{}
		parts := strings.Split(fields, "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			values[parts[i]] = parts[i+1]
		}
		if withRetry {
			values[HeaderRetryCount] = retry
		}
		if withPayload {
			values[wire.FieldPayload] = string(payload)
		}

		got, ok, headers := wire.FromStream(values)
		wantPayload, wantOK := values[wire.FieldPayload].(string)
		if ok != wantOK || (ok && string(got) != wantPayload) || (!ok && got != nil) {
			t.Fatalf("FromStream(%q) payload = (%q, %t), want (%q, %t)", values, got, ok, wantPayload, wantOK)
		}
		if len(headers) != len(values)-boolInt(wantOK) {
			t.Fatalf("FromStream(%q) headers = %q: want every other field", values, headers)
		}
		for k, v := range headers {
			if k == wire.FieldPayload || values[k] != v {
				t.Fatalf("FromStream(%q) header %q = %q", values, k, v)
			}
		}
		rc, _ := parseRetryCount(headers)
		if rc < 0 {
			t.Fatalf("retry count %d from %q", rc, headers[HeaderRetryCount])
		}

		// Written back the way a retry copy or dead letter is, as Redis returns it.
		p2, ok2, h2 := wire.FromStream(asRedisReturns(t, wire.StreamValues(got, headers)))
		if ok2 != ok || !bytes.Equal(p2, got) || !maps.Equal(h2, headers) {
			t.Fatalf("round trip of (%q, %t, %q) = (%q, %t, %q)", got, ok, headers, p2, ok2, h2)
		}

		// The retry copy counts one more delivery, whatever the header held, up to the
		// bound.
		p3, _, h3 := wire.FromStream(asRedisReturns(t, wire.StreamValues(got, withRetryCount(headers, rc+1))))
		if n, valid := parseRetryCount(h3); n != min(rc+1, MaxRetryCount) || valid != (rc < MaxRetryCount) || !bytes.Equal(p3, got) {
			t.Fatalf("retry copy of count %d reads (%d, %t), payload %q", rc, n, valid, p3)
		}
	})
}

// asRedisReturns turns XADD field/value pairs into the map go-redis returns for the entry
// (every value a string; a later field overwrites an earlier one of the same name).
func asRedisReturns(t *testing.T, pairs []any) map[string]any {
	t.Helper()
	if len(pairs)%2 != 0 {
		t.Fatalf("odd field/value pairs: %q", pairs)
	}
	out := make(map[string]any, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		k, ok := pairs[i].(string)
		if !ok {
			t.Fatalf("field name %#v is not a string", pairs[i])
		}
		switch v := pairs[i+1].(type) {
		case string:
			out[k] = v
		case []byte:
			out[k] = string(v)
		default:
			t.Fatalf("field %q value %#v is neither string nor bytes", k, v)
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
