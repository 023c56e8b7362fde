package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

func TestPeekShowsHeadersAndThePayloadDecoded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	dead, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{Error: "card 4242"}, 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("DeadLetters(card 4242) = %d, %v", len(dead), err)
	}

	t.Run("MsgpackAsJSON", func(t *testing.T) {
		p, err := b.insp.Peek(b.ctx, b.dlq, dead[0].ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got payment
		if p.Format != "json" || p.DecodeError != "" || json.Unmarshal([]byte(p.Shown), &got) != nil || got.Card != "4242" || got.ID == 0 {
			t.Fatalf("Peek = %+v, want the payment as JSON", p)
		}
		if p.Headers[settle.HeaderDeadError] != "card 4242 declined" || p.Headers["region"] != "eu" {
			t.Fatalf("headers %v, want the dead letter's", p.Headers)
		}
	})

	t.Run("RawAsHexWhenNotText", func(t *testing.T) {
		p, err := b.insp.Peek(b.ctx, b.dlq, dead[0].ID, settle.Raw)
		if err != nil || p.Format != "hex" {
			t.Fatalf("Peek raw = %+v, %v; want msgpack bytes shown in hex", p, err)
		}
	})

	t.Run("JSONAndRawText", func(t *testing.T) {
		pub := settle.NewPublisher(b.r.Client, settle.WithCodec(settle.JSON))
		id, err := pub.Publish(context.Background(), b.in, payment{Card: "9", ID: 7})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.insp.Peek(b.ctx, b.in, id, settle.JSON)
		if err != nil || p.Format != "json" || p.Shown != `{"card":"9","id":7}` {
			t.Fatalf("Peek json = %+v, %v", p, err)
		}
		p, err = b.insp.Peek(b.ctx, b.in, id, settle.Raw)
		if err != nil || p.Format != "text" || p.Shown != `{"card":"9","id":7}` {
			t.Fatalf("Peek raw = %+v, %v; want the JSON as text", p, err)
		}
	})

	t.Run("UndecodableIsShownInHex", func(t *testing.T) {
		p, err := b.insp.Peek(b.ctx, b.dlq, dead[0].ID, settle.JSON)
		if err != nil || p.Format != "hex" || p.DecodeError == "" {
			t.Fatalf("Peek of msgpack as JSON = %+v, %v; want hex and the decode error", p, err)
		}
	})

	t.Run("IDNotFound", func(t *testing.T) {
		if _, err := b.insp.Peek(b.ctx, b.dlq, "1-1", nil); !errors.Is(err, admin.ErrEntryNotFound) || !contains(err, "1-1") {
			t.Fatalf("Peek of 1-1 = %v, want ErrEntryNotFound naming it", err)
		}
	})
}
