package wire

import (
	"errors"
	"testing"
)

func TestDelayMember(t *testing.T) {
	t.Parallel()

	t.Run("RoundTripsBinaryPayloadAndHeaders", func(t *testing.T) {
		t.Parallel()
		payload := []byte{0x00, 0xff, ':', '\n', '1'}
		m := DelayMember("17-3", payload, map[string]string{"a:b": "1\n2", "settle-retry-count": "2"})
		id, got, ok, headers, err := ParseDelayMember(m)
		if err != nil || id != "17-3" || !ok || string(got) != string(payload) || headers["a:b"] != "1\n2" || headers["settle-retry-count"] != "2" {
			t.Fatalf("parse = %q %q %v %v %v", id, got, ok, headers, err)
		}
	})

	t.Run("NilPayloadWritesNoPayloadField", func(t *testing.T) {
		t.Parallel()
		_, got, ok, _, err := ParseDelayMember(DelayMember("1-1", nil, map[string]string{"h": "v"}))
		if err != nil || ok || got != nil {
			t.Fatalf("parse = %q %v %v, want no payload", got, ok, err)
		}
	})

	t.Run("RefusesGarbled", func(t *testing.T) {
		t.Parallel()
		for _, m := range []string{"", "no newline", "1-1\n", "1-1\n5:abc", "1-1\nx:abc", "1-1\n1:a"} {
			if _, _, _, _, err := ParseDelayMember(m); !errors.Is(err, ErrDelayMember) {
				t.Fatalf("ParseDelayMember(%q) err = %v, want ErrDelayMember", m, err)
			}
		}
	})
}
