package settle_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/settletest"
)

// received records the messages a handler received.
type received struct {
	mu   sync.Mutex
	msgs []settle.Message
}

func (s *received) handler() settle.Handler {
	return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.msgs = append(s.msgs, *m)
		return nil
	})
}

func (s *received) all() []settle.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]settle.Message(nil), s.msgs...)
}

// dueIn returns how far past the Redis server's TIME the one member of the delay set
// key is due.
func dueIn(t *testing.T, h *settletest.Harness, key string) time.Duration {
	t.Helper()
	ctx := context.Background()
	zs, err := h.Redis.Client.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil || len(zs) != 1 {
		t.Fatalf("delay set %s = %v, %v; want one member", key, zs, err)
	}
	now, err := h.Redis.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(int64(zs[0].Score)-now.UnixMilli()) * time.Millisecond
}

func TestPublishAfterParksInTheMountsDelaySetAndTheSweepDeliversItAsAFirstDelivery(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stream", "list", "channel"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := settletest.New(t)
			in := h.Redis.Key("in")
			dz := delayed.DurableZset{Key: h.Redis.Key("delayed"), TTL: 48 * time.Hour}
			var got received
			src := settle.Source(settle.Stream(h.Redis.Client, in, "workers"))
			switch kind {
			case "list":
				src = settle.List(h.Redis.Client, in)
			case "channel":
				src = settle.PubSub(h.Redis.Client, in)
			}
			h.Mount(src, got.handler(), settle.DelayIn(dz))
			h.Start()
			pub := settle.NewPublisher(h.Redis.Client)
			opts := []settle.PublishOption{settle.After(time.Hour), settle.DelaySet(dz), settle.Header("order", "7")}
			var err error
			switch kind {
			case "list":
				err = pub.PublishList(context.Background(), in, "hello", opts...)
			case "channel":
				var n int64
				n, err = pub.PublishChannel(context.Background(), in, "hello", opts...)
				if n != 0 {
					t.Errorf("a delayed channel publish reached %d subscribers now, want 0", n)
				}
			default:
				var id string
				id, err = pub.Publish(context.Background(), in, "hello", opts...)
				if id != "" {
					t.Errorf("a delayed publish returned the entry id %q; the entry is written later", id)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := dueIn(t, h, dz.Key); d > time.Hour || d < time.Hour-time.Minute {
				t.Fatalf("due %s after the server's TIME, want an hour", d)
			}
			h.Advance(time.Hour + time.Minute) // past due on any server (a real one's TIME ran on meanwhile)
			ev := h.WaitSettled(1)
			if ev[0].Action != settle.ActionAck || ev[0].Attempt != 1 {
				t.Fatalf("settled %+v, want an ack of attempt 1", ev[0])
			}
			m := got.all()[0]
			var s string
			if err := m.Decode(&s); err != nil || s != "hello" {
				t.Fatalf("payload %q, %v; want hello", s, err)
			}
			if m.Headers["order"] != "7" || m.Headers[settle.HeaderRetryCount] != "" {
				t.Fatalf("headers %v, want order=7 and no retry count (a first delivery)", m.Headers)
			}
		})
	}
}

func TestPublishAtIsDueAtTheTimeGiven(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	in := h.Redis.Key("in")
	dz := delayed.DurableZset{Key: h.Redis.Key("delayed")}
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.DelayIn(dz))
	h.Start()
	at := h.Clock.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	h.Publish(in, 1, settle.At(at), settle.DelaySet(dz))
	zs, err := h.Redis.Client.ZRangeWithScores(context.Background(), dz.Key, 0, -1).Result()
	if err != nil || len(zs) != 1 || int64(zs[0].Score) != at.UnixMilli() {
		t.Fatalf("delay set = %v, %v; want one member scored %d", zs, err, at.UnixMilli())
	}
	h.Advance(2*time.Hour + time.Minute)
	h.WaitSettled(1)
}

func TestPublishAfterWithoutADelaySetIsRefused(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	pub := settle.NewPublisher(r.Client)
	ctx := context.Background()
	_, err := pub.Publish(ctx, r.Key("in"), 1, settle.After(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "DelaySet") || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("Publish(After) without DelaySet = %v, want a refusal naming DelaySet and why", err)
	}
	err = pub.PublishList(ctx, r.Key("list"), 1, settle.At(time.Now()))
	if err == nil || !strings.Contains(err.Error(), "DelaySet") {
		t.Fatalf("PublishList(At) without DelaySet = %v, want a refusal naming DelaySet", err)
	}
	if n, _ := r.Client.Exists(ctx, r.Key("in"), r.Key("list")).Result(); n != 0 {
		t.Fatalf("%d keys written by refused publishes", n)
	}
}

func TestPublishDelayedRefusesADelaySetInAnotherSlotOrPastItsTTL(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	pub := settle.NewPublisher(r.Client)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		key  string
		opts []settle.PublishOption
		want string
	}{
		{"OtherSlot", "{a}:in", []settle.PublishOption{settle.After(time.Second), settle.DelaySet(delayed.DurableZset{Key: "{b}:delayed"})}, "slot"},
		{"PastTTL", r.Key("in"), []settle.PublishOption{settle.After(time.Hour), settle.DelaySet(delayed.DurableZset{Key: r.Key("d"), TTL: time.Minute})}, "TTL"},
		{"AtPastTTL", r.Key("in"), []settle.PublishOption{settle.At(time.Now().Add(24 * time.Hour)), settle.DelaySet(delayed.DurableZset{Key: r.Key("d"), TTL: time.Minute})}, "TTL"},
		{"DelaySetAlone", r.Key("in"), []settle.PublishOption{settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "without After"},
		{"AtPastTheRepresentableRangeIsRefused", r.Key("in"), []settle.PublishOption{settle.At(time.Unix(1<<60, 0)), settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "outside the times a delay can be kept until"},
		{"AtBeforeTheRepresentableRangeIsRefused", r.Key("in"), []settle.PublishOption{settle.At(time.Unix(-(1 << 50), 0)), settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "outside the times a delay can be kept until"},
		{"AfterAndAt", r.Key("in"), []settle.PublishOption{settle.After(time.Second), settle.At(time.Now()), settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "both"},
		{"Negative", r.Key("in"), []settle.PublishOption{settle.After(-time.Second), settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "negative"},
		{"MaxLenDelayed", r.Key("in"), []settle.PublishOption{settle.MaxLen(5), settle.After(time.Second), settle.DelaySet(delayed.DurableZset{Key: r.Key("d")})}, "sweep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pub.Publish(ctx, tc.key, 1, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Publish = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if n, _ := r.Client.Exists(ctx, r.Key("in"), r.Key("d")).Result(); n != 0 {
		t.Fatalf("%d keys written by refused publishes", n)
	}
}

func TestPublishOptionsThatDoNotApplyToTheKindAreRefused(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	pub := settle.NewPublisher(r.Client)
	ctx := context.Background()
	if _, err := pub.PublishChannel(ctx, r.Key("ch"), 1, settle.MaxLen(10)); err == nil || !strings.Contains(err.Error(), "MaxLen") {
		t.Fatalf("PublishChannel(MaxLen) = %v, want a refusal naming MaxLen", err)
	}
	if err := pub.PublishList(ctx, r.Key("l"), 1, settle.MinID("1-0")); err == nil || !strings.Contains(err.Error(), "MinID") {
		t.Fatalf("PublishList(MinID) = %v, want a refusal naming MinID", err)
	}
	for _, bad := range []settle.PublishOption{settle.MaxLen(0), settle.MinID("")} {
		if _, err := pub.Publish(ctx, r.Key("s"), 1, bad); err == nil {
			t.Fatal("Publish with MaxLen(0) or MinID(\"\") succeeded, want a refusal")
		}
	}
	if _, err := pub.Publish(ctx, r.Key("s"), 1, settle.MaxLen(5), settle.MinID("1-0")); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("Publish(MaxLen, MinID) = %v, want a refusal", err)
	}
}

func TestPublishMaxLenAndMinIDBoundTheStream(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	pub := settle.NewPublisher(r.Client)
	ctx := context.Background()
	key := r.Key("s")
	var ids []string
	for i := range 1000 {
		id, err := pub.Publish(ctx, key, i, settle.MaxLen(10))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// MAXLEN ~ trims whole macro nodes (100 entries by default on a real server).
	if n := r.Client.XLen(ctx, key).Val(); n < 10 || n > 200 {
		t.Fatalf("XLEN = %d after 1000 publishes with MaxLen(10), want about 10 (at most a node more)", n)
	}
	key = r.Key("m")
	ids = ids[:0]
	for i := range 5 {
		id, err := pub.Publish(ctx, key, i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := pub.Publish(ctx, key, 5, settle.MinID(ids[3])); err != nil {
		t.Fatal(err)
	}
	msgs, err := r.Client.XRange(ctx, key, "-", "+").Result()
	if err != nil || len(msgs) != 3 || msgs[0].ID != ids[3] {
		t.Fatalf("after MinID(%s): %v, %v; want the entries from it on", ids[3], msgs, err)
	}
}
