package cbor_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/cbor"
	"github.com/settlekit/settle/settletest"
)

type paymentRequest struct {
	Order    int64    `cbor:"order"`
	Customer string   `cbor:"customer"`
	Lines    []string `cbor:"lines"`
	Amount   uint32   `cbor:"amount"`
}

// golden compares got with testdata/name; SETTLE_UPDATE_GOLDEN=1 rewrites the file.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("SETTLE_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding of %s:\n got %x\nwant %x", name, got, want)
	}
}

func TestCodecEncodesDeterministicallyAsGolden(t *testing.T) {
	t.Parallel()
	req := paymentRequest{Order: 42, Customer: "ada", Lines: []string{"book", "pen"}, Amount: 1250}
	got, err := cbor.Codec.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "payment_request.cbor", got)
	// Map keys are sorted by their encoding whatever the map's iteration order.
	m := map[string]int{"zeta": 1, "a": 2, "mid": 3, "bb": 4}
	first, err := cbor.Codec.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "map.cbor", first)
	for range 20 {
		again, err := cbor.Codec.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, first) {
			t.Fatalf("map encodes as %x, then as %x", first, again)
		}
	}
}

func TestCodecRoundTripsAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	want := paymentRequest{Order: 7, Customer: "bo", Lines: []string{"x"}, Amount: 3}
	b, err := cbor.Codec.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got paymentRequest
	if err := cbor.Codec.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Order != want.Order || got.Customer != want.Customer || len(got.Lines) != 1 || got.Amount != want.Amount {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if cbor.Codec.Name() != "cbor" {
		t.Fatalf("Name() = %q, want cbor", cbor.Codec.Name())
	}
	for name, bad := range map[string][]byte{
		"Truncated":    b[:len(b)-2],
		"NotCBOR":      {0xff, 0x00},
		"DuplicateKey": {0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02}, // {"a": 1, "a": 2}
	} {
		var v map[string]int
		if err := cbor.Codec.Unmarshal(bad, &v); err == nil {
			t.Errorf("%s: Unmarshal(%x) = nil error, want one", name, bad)
		}
	}
}

func TestTypedHandlerDecodesCBORAndSettlesUndecodableAsFailure(t *testing.T) {
	t.Parallel()
	broker := settletest.NewBroker()
	topic := broker.Topic("payments.requested")
	got := make(chan paymentRequest, 1)
	h := settletest.New(t)
	h.Mount(topic, settle.Typed(func(_ context.Context, _ *settle.Message, r paymentRequest) error {
		got <- r
		return nil
	}), settle.WithCodec(cbor.Codec), settle.MaxAttempts(1), settle.DeadLetter("payments.dead"))
	h.Start()
	b, err := cbor.Codec.Marshal(paymentRequest{Order: 9, Customer: "cy"})
	if err != nil {
		t.Fatal(err)
	}
	topic.Publish(b, nil)
	if r := <-got; r.Order != 9 || r.Customer != "cy" {
		t.Fatalf("handler got %+v", r)
	}
	topic.Publish([]byte{0xff}, nil)
	var ev settle.Settled
	for _, e := range h.WaitAction(settle.ActionDeadLetter, 1) { // every event so far
		if e.Action == settle.ActionDeadLetter {
			ev = e
		}
	}
	var de *settle.DecodeError
	if !errors.As(ev.HandlerErr, &de) || de.Codec != "cbor" {
		t.Fatalf("dead letter's handler error = %v, want a cbor *DecodeError", ev.HandlerErr)
	}
	if n := broker.Topic("payments.dead").Len(); n != 1 {
		t.Fatalf("payments.dead holds %d messages, want 1", n)
	}
}
