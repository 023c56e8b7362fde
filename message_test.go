package settle

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDecodeWithoutPayloadField(t *testing.T) {
	t.Parallel()

	m := &Message{Headers: map[string]string{"kind": "foreign"}, codec: Msgpack, noPayload: true}
	var v map[string]any
	err := m.Decode(&v)
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("got %v (%T), want a *DecodeError", err, err)
	}
	if !strings.Contains(err.Error(), "payload field") {
		t.Fatalf("got %q, want a message mentioning the payload field", err)
	}
	if de.Codec != "msgpack" {
		t.Fatalf("got codec %q, want msgpack", de.Codec)
	}
	if OutcomeOf(err).Kind != OutcomeRetry {
		t.Fatalf("a decode failure must spend an attempt (Retry), got %q", OutcomeOf(err).Kind)
	}
}

func TestDecodeUsesMountCodec(t *testing.T) {
	t.Parallel()

	m := &Message{Payload: []byte(`{"amount":7}`), codec: JSON}
	var v codecRefund
	if err := m.Decode(&v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if v.Amount != 7 {
		t.Fatalf("got %+v, want amount 7", v)
	}
}

func TestDecodeDefaultsToMsgpack(t *testing.T) {
	t.Parallel()

	b, err := Msgpack.Marshal(codecRefund{Amount: 3})
	if err != nil {
		t.Fatal(err)
	}
	m := &Message{Payload: b}
	var v codecRefund
	if err := m.Decode(&v); err != nil {
		t.Fatalf("decode with no codec set: %v", err)
	}
	if v.Amount != 3 {
		t.Fatalf("got %+v, want amount 3", v)
	}
}

func TestDecodeGarbageIsDecodeError(t *testing.T) {
	t.Parallel()

	m := &Message{Payload: []byte{0xc1, 0x00}, codec: Msgpack}
	var v codecRefund
	var de *DecodeError
	if err := m.Decode(&v); !errors.As(err, &de) || de.Err == nil {
		t.Fatalf("got %v, want a *DecodeError keeping the codec's error", err)
	}
}

func TestTypedDoesNotCallFnOnDecodeFailure(t *testing.T) {
	t.Parallel()

	called := false
	h := Typed(func(ctx context.Context, m *Message, v codecRefund) error {
		called = true
		return nil
	})
	for _, m := range []*Message{
		{Payload: []byte("not msgpack at all \xc1"), codec: Msgpack},
		{codec: Msgpack}, // no payload field
	} {
		err := h.Handle(context.Background(), m)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("got %v, want a *DecodeError", err)
		}
	}
	if called {
		t.Fatal("fn was called with a payload that did not decode")
	}
}

func TestTypedPassesDecodedValueAndReturnsFnError(t *testing.T) {
	t.Parallel()

	b, err := Msgpack.Marshal(codecRefund{Amount: 9, ID: "r-9"})
	if err != nil {
		t.Fatal(err)
	}
	wantErr := Drop(errors.New("declined"))
	var got codecRefund
	h := Typed(func(ctx context.Context, m *Message, v codecRefund) error {
		got = v
		return wantErr
	})
	if err := h.Handle(context.Background(), &Message{Payload: b, codec: Msgpack}); err != wantErr {
		t.Fatalf("got %v, want fn's error returned as it is", err)
	}
	if got.Amount != 9 || got.ID != "r-9" {
		t.Fatalf("fn got %+v, want the decoded value", got)
	}
}

func TestHandlerFuncCallsFunction(t *testing.T) {
	t.Parallel()

	want := errors.New("x")
	var seen *Message
	h := HandlerFunc(func(ctx context.Context, m *Message) error { seen = m; return want })
	m := &Message{ID: "1-0"}
	if err := h.Handle(context.Background(), m); err != want || seen != m {
		t.Fatalf("got (%v, %p), want (%v, %p)", err, seen, want, m)
	}
}
