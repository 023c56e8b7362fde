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

func TestValueDelayMember(t *testing.T) {
	t.Parallel()

	t.Run("RoundTripsBinaryEnvelopeBehindToken", func(t *testing.T) {
		t.Parallel()
		value := Envelope([]byte{0x00, '\n', 0xff}, map[string]string{"settle-retry-count": "2", "h": "a\nb"})
		token, got, err := ParseValueDelayMember(ValueDelayMember("tok", value))
		if err != nil || token != "tok" || string(got) != string(value) {
			t.Fatalf("parse = %q %q %v, want tok and the envelope byte for byte", token, got, err)
		}
	})

	t.Run("SameValueUnderTwoTokensIsTwoMembers", func(t *testing.T) {
		t.Parallel()
		value := Envelope([]byte("p"), nil)
		if ValueDelayMember("a", value) == ValueDelayMember("b", value) {
			t.Fatal("two parks of the same bytes would collapse into one set member")
		}
	})

	t.Run("NewlineInTokenCannotShiftTheValue", func(t *testing.T) {
		t.Parallel()
		token, got, err := ParseValueDelayMember(ValueDelayMember("a\nb", []byte("v")))
		if err != nil || token != "a_b" || string(got) != "v" {
			t.Fatalf("parse = %q %q %v, want a_b and v", token, got, err)
		}
	})

	t.Run("RefusesMemberWithoutToken", func(t *testing.T) {
		t.Parallel()
		if _, _, err := ParseValueDelayMember("no newline"); !errors.Is(err, ErrDelayMember) {
			t.Fatalf("err = %v, want ErrDelayMember", err)
		}
	})
}
