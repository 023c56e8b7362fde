package settle_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/settletest"
)

type order struct {
	ID int `msgpack:"id"`
}

type paid struct {
	Order int `msgpack:"order"`
}

// recordingReplier records what it publishes; fail, when set, refuses the n-th call.
type recordingReplier struct {
	mu    sync.Mutex
	calls int
	fail  map[int]bool
	got   []paid
	dests []string
	heads []map[string]string
}

func (r *recordingReplier) PublishReply(_ context.Context, dest string, payload []byte, headers map[string]string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail[r.calls] {
		return errors.New("channel server unreachable")
	}
	var p paid
	if err := settle.Msgpack.Unmarshal(payload, &p); err != nil {
		return err
	}
	r.got, r.dests, r.heads = append(r.got, p), append(r.dests, dest), append(r.heads, headers)
	return nil
}

func (r *recordingReplier) published() []paid {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]paid(nil), r.got...)
}

func payOrder(_ context.Context, _ *settle.Message, o order) (paid, error) {
	return paid{Order: o.ID}, nil
}

func publishOrder(t *testing.T, topic *settletest.Topic, id int) string {
	t.Helper()
	b, err := settle.Msgpack.Marshal(order{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return topic.Publish(b, nil)
}

func TestReplyToSameStoreWritesTheReplyAndCompletesInOneSettlement(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	broker := settletest.NewBroker()
	in := broker.Topic("orders")
	h.Mount(in, settle.Reply(payOrder), settle.ReplyTo("orders.paid"))
	h.Start()
	id := publishOrder(t, in, 7)
	ev := h.WaitSettled(1)[0]
	if ev.Action != settle.ActionReply || !ev.Final() {
		t.Fatalf("settlement %+v, want a final reply", ev)
	}
	replies := broker.Topic("orders.paid").Messages()
	if len(replies) != 1 {
		t.Fatalf("%d replies, want 1", len(replies))
	}
	var got paid
	if err := settle.Msgpack.Unmarshal(replies[0].Payload, &got); err != nil || got.Order != 7 {
		t.Fatalf("reply %+v (%v), want order 7", got, err)
	}
	if replies[0].Headers[settle.HeaderReplyOf] != id || replies[0].Headers[settle.HeaderReplySource] != "orders" {
		t.Fatalf("reply headers %v, want %s=%s and %s=orders", replies[0].Headers, settle.HeaderReplyOf, id, settle.HeaderReplySource)
	}
	if in.Len() != 0 || in.InFlight() != 0 {
		t.Fatalf("orders holds %d, %d in flight; want the original completed", in.Len(), in.InFlight())
	}
}

func TestReplyViaPublishesThenCompletes(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	in := settletest.NewBroker().Topic("orders")
	r := &recordingReplier{}
	h.Mount(in, settle.Reply(payOrder), settle.ReplyTo("paid-channel"), settle.ReplyVia(r))
	h.Start()
	publishOrder(t, in, 3)
	if ev := h.WaitSettled(1)[0]; ev.Action != settle.ActionReply || ev.Err != nil {
		t.Fatalf("settlement %+v, want an applied reply", ev)
	}
	if got := r.published(); len(got) != 1 || got[0].Order != 3 || r.dests[0] != "paid-channel" {
		t.Fatalf("published %+v to %v, want order 3 to paid-channel", got, r.dests)
	}
}

func TestReplyViaFailedPublishIsARetryAndNoReplyIsLost(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	broker := settletest.NewBroker()
	in := broker.Topic("orders")
	r := &recordingReplier{fail: map[int]bool{1: true}}
	h.Mount(in, settle.Reply(payOrder), settle.ReplyTo("paid-channel"), settle.ReplyVia(r),
		settle.MaxAttempts(3), settle.DeadLetter("orders.dead"))
	h.Start()
	publishOrder(t, in, 5)
	failed := onlyAction(t, h.WaitAction(settle.ActionPark, 1), settle.ActionPark)
	if failed.Outcome != settle.OutcomeRetry || !strings.Contains(failed.HandlerErr.Error(), "publish reply 1 of 1 to \"paid-channel\"") {
		t.Fatalf("settlement %+v, want a retry naming the failed publish", failed)
	}
	h.Advance(time.Minute) // past the backoff
	ok := onlyAction(t, h.WaitAction(settle.ActionReply, 1), settle.ActionReply)
	if ok.Attempt != 2 {
		t.Fatalf("reply at attempt %d, want 2", ok.Attempt)
	}
	if got := r.published(); len(got) != 1 || got[0].Order != 5 {
		t.Fatalf("published %+v, want order 5 once", got)
	}
	if n := len(broker.Topic("orders.dead").Messages()); n != 0 {
		t.Fatalf("%d dead letters, want 0", n)
	}
}

func TestHandlerErrorPublishesNoReply(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	broker := settletest.NewBroker()
	in := broker.Topic("orders")
	h.Mount(in, settle.Reply(func(context.Context, *settle.Message, order) (paid, error) {
		return paid{Order: 1}, settle.Drop(errors.New("declined"))
	}), settle.ReplyTo("orders.paid"))
	h.Start()
	publishOrder(t, in, 1)
	if ev := h.WaitSettled(1)[0]; ev.Action != settle.ActionDrop {
		t.Fatalf("settlement %+v, want the handler's drop", ev)
	}
	if n := broker.Topic("orders.paid").Len(); n != 0 {
		t.Fatalf("%d replies, want none", n)
	}
}

// deadLetterOfOne mounts h on a broker topic with a cap of 1 (and opts), publishes one
// message and returns its dead letter's settlement and the broker.
func deadLetterOfOne(t *testing.T, h settle.Handler, opts ...settle.MountOption) (settle.Settled, *settletest.Broker) {
	t.Helper()
	th := settletest.New(t)
	broker := settletest.NewBroker()
	th.Mount(broker.Topic("orders"), h, append(opts, settle.MaxAttempts(1), settle.DeadLetter("orders.dead"))...)
	th.Start()
	publishOrder(t, broker.Topic("orders"), 1)
	return onlyAction(t, th.WaitAction(settle.ActionDeadLetter, 1), settle.ActionDeadLetter), broker
}

func TestReplyWithoutReplyToFailsTheDeliveryWithErrNoReplyTo(t *testing.T) {
	t.Parallel()
	ev, _ := deadLetterOfOne(t, settle.Reply(payOrder))
	if !errors.Is(ev.HandlerErr, settle.ErrNoReplyTo) {
		t.Fatalf("handler error %v, want ErrNoReplyTo", ev.HandlerErr)
	}
}

func TestReplyTheCodecRefusesIsAFailureWithAnEncodeError(t *testing.T) {
	t.Parallel()
	ev, broker := deadLetterOfOne(t, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		return m.Reply(42) // the raw codec encodes only []byte and string
	}), settle.WithCodec(settle.Raw), settle.ReplyTo("orders.paid"))
	var ee *settle.EncodeError
	if !errors.As(ev.HandlerErr, &ee) || ee.Codec != "raw" {
		t.Fatalf("handler error %v, want a raw *EncodeError", ev.HandlerErr)
	}
	if n := broker.Topic("orders.paid").Len(); n != 0 {
		t.Fatalf("%d replies, want none", n)
	}
}

func TestReplyOptionsAreValidatedAtStartup(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: Validate only
	defer rdb.Close()
	r := &recordingReplier{}
	for _, tc := range []struct {
		name string
		src  settle.Source
		opts []settle.MountOption
		want string
	}{
		{"SourceThatCannotReplyNeedsReplyVia", settle.PubSub(rdb, "orders"), []settle.MountOption{settle.ReplyTo("paid")}, `ReplyTo("paid"): a channel source cannot write replies atomically itself; give ReplyVia`},
		{"ReplyViaNeedsReplyTo", settletest.NewBroker().Topic("orders"), []settle.MountOption{settle.ReplyVia(r)}, "ReplyVia without ReplyTo"},
		{"StreamReplyToItself", settle.Stream(rdb, "{o}:in", "g"), []settle.MountOption{settle.ReplyTo("{o}:in")}, `ReplyTo("{o}:in") is the stream the mount reads`},
		{"TopicReplyToItself", settletest.NewBroker().Topic("orders"), []settle.MountOption{settle.ReplyTo("orders")}, `ReplyTo("orders") is the topic the mount reads`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(tc.src, settle.Reply(payOrder), tc.opts...)
			if err := app.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to say %q", err, tc.want)
			}
		})
	}
	t.Run("PubSubWithReplyViaStarts", func(t *testing.T) {
		t.Parallel()
		app, err := settle.New(settle.Config{})
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(settle.PubSub(rdb, "orders"), settle.Reply(payOrder), settle.ReplyTo("paid"), settle.ReplyVia(r))
		if err := app.Validate(); err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
	})
}

func TestReplyToInAnotherClusterSlotIsRefused(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"127.0.0.1:1"},
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("test: validation must not dial")
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	in, replies := "orders:in", "orders:paid"
	if keys.Slot(in) == keys.Slot(replies) {
		t.Fatalf("test premise: %s and %s share a slot", in, replies)
	}
	for _, tc := range []struct {
		name string
		src  settle.Source
		want string
	}{
		{"Stream", settle.Stream(rdb, in, "workers"), "a stream and its ReplyTo must share a cluster slot"},
		{"ReliableList", settle.ReliableList(rdb, in), "a reliable list and its ReplyTo must share a cluster slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(tc.src, settle.Reply(payOrder), settle.ReplyTo(replies))
			if err := app.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to say %q", err, tc.want)
			}
			// One hash tag: accepted.
			app, err = settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(tc.src, settle.Reply(payOrder), settle.ReplyTo("{"+in+"}:paid"))
			if err := app.Validate(); err != nil && strings.Contains(err.Error(), "ReplyTo") {
				t.Fatalf("Validate() = %v, want no ReplyTo refusal for a key of the same slot", err)
			}
		})
	}
}
