package settle_test

import (
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/wire"
	"github.com/settlekit/settle/settletest"
)

// A stream mount replying to a channel (another kind of store): each reply is
// published through the Publisher's ChannelReplier, in settle's envelope with the
// reply headers, and the original completed after.
func TestStreamReplyViaChannelReplierPublishesTheReplyWithItsHeaders(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	in, channel := h.Redis.Key("orders"), h.Redis.Key("orders.paid")
	sub := h.Redis.Client.Subscribe(t.Context(), channel)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	pub := settle.NewPublisher(h.Redis.Client)
	h.Mount(settle.Stream(h.Redis.Client, in, "payments"), settle.Reply(payOrder),
		settle.ReplyTo(channel), settle.ReplyVia(pub.ChannelReplier()))
	h.Start()
	id := h.Publish(in, order{ID: 9})
	if ev := h.WaitSettled(1)[0]; ev.Action != settle.ActionReply || ev.Err != nil {
		t.Fatalf("settlement %+v, want an applied reply", ev)
	}
	msg := <-sub.Channel()
	payload, headers, ok, err := wire.FromEnvelope([]byte(msg.Payload))
	if !ok || err != nil {
		t.Fatalf("channel message %q is not an envelope: %v", msg.Payload, err)
	}
	var got paid
	if err := settle.Msgpack.Unmarshal(payload, &got); err != nil || got.Order != 9 {
		t.Fatalf("reply %+v (%v), want order 9", got, err)
	}
	if headers[settle.HeaderReplyOf] != id || headers[settle.HeaderReplySource] != in {
		t.Fatalf("reply headers %v, want %s=%s, %s=%s", headers, settle.HeaderReplyOf, id, settle.HeaderReplySource, in)
	}
}

// A stream mount replying to a stream of another hash slot through StreamReplier, and
// to a list through ListReplier.
func TestStreamAndListRepliersWriteTheReplyWithItsHeaders(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stream", "list"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := settletest.New(t)
			in, dest := h.Redis.Key("orders"), h.Redis.Key("elsewhere:paid")
			pub := settle.NewPublisher(h.Redis.Client)
			r := pub.StreamReplier()
			if kind == "list" {
				r = pub.ListReplier()
			}
			h.Mount(settle.Stream(h.Redis.Client, in, "payments"), settle.Reply(payOrder), settle.ReplyTo(dest), settle.ReplyVia(r))
			h.Start()
			id := h.Publish(in, order{ID: 4})
			h.WaitAction(settle.ActionReply, 1)
			var headers map[string]string
			if kind == "stream" {
				entries, err := h.Redis.Client.XRange(t.Context(), dest, "-", "+").Result()
				if err != nil || len(entries) != 1 {
					t.Fatalf("%s holds %v (%v), want one reply", dest, entries, err)
				}
				headers = map[string]string{}
				for k, v := range entries[0].Values {
					headers[k], _ = v.(string)
				}
			} else {
				items, err := h.Redis.Client.LRange(t.Context(), dest, 0, -1).Result()
				if err != nil || len(items) != 1 {
					t.Fatalf("%s holds %v (%v), want one reply", dest, items, err)
				}
				_, headers, _, err = wire.FromEnvelope([]byte(items[0]))
				if err != nil {
					t.Fatal(err)
				}
			}
			if headers[settle.HeaderReplyOf] != id {
				t.Fatalf("reply headers %v, want %s=%s", headers, settle.HeaderReplyOf, id)
			}
		})
	}
}
