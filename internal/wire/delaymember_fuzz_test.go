package wire

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
)

// FuzzDelayMember proves a delay member round-trips: any payload (nil meaning no payload
// field) and any headers, under an entry id without a newline (Redis ids are
// "<ms>-<seq>"), parse back as they were written, a header named like the payload field
// excepted (StreamValues never lets a header overwrite the payload).
//
// Headers are given as one string: NUL-separated name/value pairs.
func FuzzDelayMember(f *testing.F) {
	f.Add("1700000000000-0", []byte("body"), false, "settle-retry-count\x002\x00trace\x00abc")
	f.Add("1-1", []byte{0x00, 0xff, ':', '\n', '1'}, false, "a:b\x001\n2")
	f.Add("0-0", []byte(nil), true, "h\x00v")
	f.Add("17-3", []byte{}, false, "")
	f.Add("5-0", []byte("12:x"), false, "payload\x00impostor\x003:\x00:3")
	f.Fuzz(func(t *testing.T, id string, payload []byte, noPayload bool, fields string) {
		if strings.ContainsRune(id, '\n') {
			return // not an entry id; ParseDelayMember reads up to the first newline
		}
		if noPayload {
			payload = nil
		} else if payload == nil {
			payload = []byte{}
		}
		headers := map[string]string{}
		parts := strings.Split(fields, "\x00")
		for i := 0; i+1 < len(parts); i += 2 {
			headers[parts[i]] = parts[i+1]
		}
		want := maps.Clone(headers)
		delete(want, FieldPayload)
		m := DelayMember(id, payload, headers)
		gotID, got, ok, gotHeaders, err := ParseDelayMember(m)
		if payload == nil && len(want) == 0 {
			// Nothing to write: an empty member is refused, never read as an entry.
			if !errors.Is(err, ErrDelayMember) {
				t.Fatalf("ParseDelayMember of an entry with no fields: err %v, want ErrDelayMember", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseDelayMember(%q): %v", m, err)
		}
		if gotID != id || ok == noPayload || !bytes.Equal(got, payload) || (payload == nil) != (got == nil) || !maps.Equal(gotHeaders, want) {
			t.Fatalf("round trip of (%q, %q, %q) = (%q, %q, %t, %q)", id, payload, headers, gotID, got, ok, gotHeaders)
		}
	})
}

// FuzzParseDelayMember proves parsing any string never panics, refuses what it cannot
// read with ErrDelayMember, and that what it reads writes back as a member that reads
// the same.
func FuzzParseDelayMember(f *testing.F) {
	f.Add(DelayMember("1-1", []byte("p"), map[string]string{"h": "v"}))
	f.Add(DelayMember("2-0", nil, map[string]string{"order": "42"}))
	for _, m := range []string{"", "no newline", "1-1\n", "1-1\n5:abc", "1-1\nx:abc", "1-1\n1:a", "1-1\n-1:a", "1-1\n99999999999999999999:a", "1-1\n1:a1:b1:c1:d", "\n0:0:"} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, m string) {
		id, payload, ok, headers, err := ParseDelayMember(m)
		if err != nil {
			if !errors.Is(err, ErrDelayMember) {
				t.Fatalf("ParseDelayMember(%q): %v does not wrap ErrDelayMember", m, err)
			}
			return
		}
		if ok != (payload != nil) {
			t.Fatalf("ParseDelayMember(%q): payload %q but ok %t", m, payload, ok)
		}
		again := DelayMember(id, payload, headers)
		id2, p2, ok2, h2, err := ParseDelayMember(again)
		if err != nil || id2 != id || ok2 != ok || !bytes.Equal(p2, payload) || !maps.Equal(h2, headers) {
			t.Fatalf("re-parse of %q = (%q, %q, %t, %q, %v), want (%q, %q, %t, %q)", again, id2, p2, ok2, h2, err, id, payload, ok, headers)
		}
	})
}
