package settle_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

type refund struct {
	Amount int    `json:"amount" msgpack:"amount"`
	ID     string `json:"id" msgpack:"id"`
}

// onlyEntry returns the one entry of key.
func onlyEntry(t *testing.T, r *redistest.Redis, key string) map[string]any {
	t.Helper()
	msgs, err := r.Client.XRange(context.Background(), key, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("xrange %s = %v, %v; want one entry", key, msgs, err)
	}
	return msgs[0].Values
}

func TestPublisherEncodesWithMsgpackByDefault(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	v := refund{Amount: 250, ID: "r-1"}
	id, err := settle.NewPublisher(r.Client).Publish(context.Background(), key, v, settle.Headers(map[string]string{"tenant": "acme"}))
	if err != nil || id == "" {
		t.Fatalf("Publish = %q, %v", id, err)
	}
	want, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := onlyEntry(t, r, key)
	if got["payload"] != string(want) || got["tenant"] != "acme" || len(got) != 2 {
		t.Fatalf("entry %q, want the msgpack payload %q and the header tenant=acme", got, want)
	}
}

func TestPublisherWithCodecJSON(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	if _, err := settle.NewPublisher(r.Client, settle.WithCodec(settle.JSON)).Publish(context.Background(), key, refund{Amount: 250, ID: "r-1"}); err != nil {
		t.Fatal(err)
	}
	if got := onlyEntry(t, r, key); got["payload"] != `{"amount":250,"id":"r-1"}` || len(got) != 1 {
		t.Fatalf("entry %q, want the JSON payload alone", got)
	}
}

func TestPublisherRefusesReservedHeaderNames(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	pub := settle.NewPublisher(r.Client)
	for _, tc := range []struct {
		name   string
		header string
		says   string // what the error must say about the header
	}{
		{"SettlePrefix", settle.HeaderRetryCount, `"` + settle.HeaderRetryCount + `"`},
		{"AnySettlePrefix", settle.HeaderPrefix + "mine", `"` + settle.HeaderPrefix + "mine" + `"`},
		{"PayloadField", "payload", `"payload"`},
		{"Empty", "", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pub.Publish(context.Background(), key, "x", settle.Headers(map[string]string{"ok": "1", tc.header: "v"}))
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Publish with header %q = %v, want an error naming the key and saying %s", tc.header, err, tc.says)
			}
		})
	}
	if n, err := r.Client.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("exists %s = %d, %v; want nothing written", key, n, err)
	}
}

func TestPublisherPublishBytesNilStillWritesPayloadField(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	if _, err := settle.NewPublisher(r.Client).PublishBytes(context.Background(), key, nil, settle.Headers(map[string]string{"kind": "ping"})); err != nil {
		t.Fatal(err)
	}
	got := onlyEntry(t, r, key)
	if p, ok := got["payload"]; !ok || p != "" || got["kind"] != "ping" {
		t.Fatalf("entry %q, want an empty payload field and kind=ping", got)
	}
}
