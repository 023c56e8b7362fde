package settle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

// A publish whose IdempotencyKey was published within the window writes nothing and
// returns the first id; another key, or the same key once the window has passed, writes.
func TestIdempotencyKeyPublishesAKeyOncePerWindowAndReturnsTheFirstID(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("in")
	pub := settle.NewPublisher(r.Client)
	first, err := pub.Publish(ctx, key, "a", settle.IdempotencyKey("order-1"), settle.IdempotencyWindow(time.Minute))
	if err != nil || first == "" {
		t.Fatalf("Publish = %q, %v", first, err)
	}
	again, err := pub.Publish(ctx, key, "b", settle.IdempotencyKey("order-1"), settle.IdempotencyWindow(time.Minute))
	if err != nil || again != first {
		t.Fatalf("the second publish of the key = %q, %v; want the first id %q", again, err, first)
	}
	other, err := pub.Publish(ctx, key, "c", settle.IdempotencyKey("order-2"))
	if err != nil || other == first {
		t.Fatalf("another key's publish = %q, %v; want a new entry", other, err)
	}
	if n := r.Client.XLen(ctx, key).Val(); n != 2 {
		t.Fatalf("the stream holds %d entries, want 2", n)
	}
	// The key's mark lives for the window (miniredis's clock moves past it; a real
	// server's expiry is Redis's own).
	marks, _ := r.Client.Keys(ctx, r.Prefix+"*idempotency:order-1").Result()
	if len(marks) != 1 {
		t.Fatalf("marks %q, want one for the key", marks)
	}
	if ttl := r.Client.PTTL(ctx, marks[0]).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the key's mark lives %s, want at most the window", ttl)
	}
	if r.Mini == nil {
		return
	}
	r.Mini.FastForward(time.Minute + time.Second)
	later, err := pub.Publish(ctx, key, "d", settle.IdempotencyKey("order-1"))
	if err != nil || later == first {
		t.Fatalf("the key's publish past its window = %q, %v; want a new entry", later, err)
	}
}

// IdempotencyKey's bad uses are refused with their reason, and write nothing.
func TestIdempotencyKeyRefusesBadUses(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("in")
	pub := settle.NewPublisher(r.Client)
	for _, tc := range []struct {
		opts []settle.PublishOption
		want string
	}{
		{[]settle.PublishOption{settle.IdempotencyKey("")}, "give a key"},
		{[]settle.PublishOption{settle.IdempotencyWindow(time.Minute)}, "without IdempotencyKey"},
		{[]settle.PublishOption{settle.IdempotencyKey("k"), settle.IdempotencyWindow(0)}, "must be positive"},
		{[]settle.PublishOption{settle.IdempotencyKey("k"), settle.After(time.Second)}, "with a delay"},
	} {
		if _, err := pub.Publish(ctx, key, "x", tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Publish = %v, want a refusal saying %q", err, tc.want)
		}
	}
	if err := pub.PublishList(ctx, r.Key("list"), "x", settle.IdempotencyKey("k")); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Fatalf("PublishList = %v, want IdempotencyKey refused on a list", err)
	}
	if n := r.Client.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("a refused publish wrote the stream")
	}
}
