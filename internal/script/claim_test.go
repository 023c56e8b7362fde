package script_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// claimBundle is a stream with group "g" and entries delivered to consumer "dead".
type claimBundle struct {
	ctx    context.Context
	ids    []string
	r      *redistest.Redis
	stream string
}

func setupClaim(t *testing.T, n int) *claimBundle {
	t.Helper()
	ctx := context.Background()
	r := redistest.New(t)
	b := &claimBundle{ctx: ctx, r: r, stream: r.Key("s")}
	if err := r.Client.XGroupCreateMkStream(ctx, b.stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for range n {
		id, err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"payload", "p"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		b.ids = append(b.ids, id)
	}
	if n > 0 {
		if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{b.stream, ">"}, Count: int64(n)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// pending returns id's owner and delivery count.
func (b *claimBundle) pending(t *testing.T, id string) (string, int64) {
	t.Helper()
	p, err := b.r.Client.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: "g", Start: id, End: id, Count: 1}).Result()
	if err != nil || len(p) != 1 {
		t.Fatalf("xpending %s: %v %v", id, p, err)
	}
	return p[0].Consumer, p[0].RetryCount
}

// idle makes the pending entries look idle for d (XCLAIM … IDLE, keeping owner and
// count), on either server, without waiting.
func (b *claimBundle) idle(t *testing.T, d time.Duration) {
	t.Helper()
	for _, id := range b.ids {
		owner, n := b.pending(t, id)
		if err := b.r.Client.Do(b.ctx, "XCLAIM", b.stream, "g", owner, 0, id, "IDLE", d.Milliseconds(), "RETRYCOUNT", n, "JUSTID").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("ClaimsIdleEntriesWithTheirDeliveryCounts", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 2)
		b.idle(t, 50*time.Millisecond)
		res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 20*time.Millisecond, "0-0", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 2 || res.Next != "0-0" {
			t.Fatalf("got %d entries, next %q; want 2, 0-0", len(res.Entries), res.Next)
		}
		for i, e := range res.Entries {
			if e.ID != b.ids[i] || e.Values["payload"] != "p" {
				t.Fatalf("entry %d = %+v, want %s with payload p", i, e, b.ids[i])
			}
			if res.Counts[i] != 2 {
				t.Fatalf("count of %s = %d, want 2 (read once, claimed once)", e.ID, res.Counts[i])
			}
			if owner, _ := b.pending(t, e.ID); owner != "me" {
				t.Fatalf("owner of %s = %q, want me", e.ID, owner)
			}
		}
	})

	t.Run("LeavesEntriesNotIdleLongEnough", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 1)
		res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", time.Hour, "0-0", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 0 {
			t.Fatalf("claimed %d entries, want none", len(res.Entries))
		}
		if owner, n := b.pending(t, b.ids[0]); owner != "dead" || n != 1 {
			t.Fatalf("pending = %s/%d, want dead/1", owner, n)
		}
	})

	t.Run("CountBoundsOneCallAndTheCursorContinues", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 3)
		b.idle(t, 50*time.Millisecond)
		res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 20*time.Millisecond, "0-0", 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 2 || res.Next != b.ids[2] {
			t.Fatalf("got %d entries, next %q; want 2, %s", len(res.Entries), res.Next, b.ids[2])
		}
		res, err = script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 20*time.Millisecond, res.Next, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 1 || res.Entries[0].ID != b.ids[2] || res.Next != "0-0" {
			t.Fatalf("second call: %+v, want %s then cursor 0-0", res, b.ids[2])
		}
	})
}

func TestClaimSkipsEntriesInFlight(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 2)
	b.idle(t, 50*time.Millisecond)
	// "dead" still handles ids[0]: its own claim must neither return it nor count it.
	res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "dead", 20*time.Millisecond, "0-0", 10, b.ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 1 || res.Entries[0].ID != b.ids[1] || res.Counts[0] != 2 {
		t.Fatalf("claimed %+v (counts %v), want only %s with count 2", res.Entries, res.Counts, b.ids[1])
	}
	if owner, n := b.pending(t, b.ids[0]); owner != "dead" || n != 1 {
		t.Fatalf("entry in flight: pending %s/%d, want dead/1 (its count untouched)", owner, n)
	}
}

func TestTouch(t *testing.T) {
	t.Parallel()

	t.Run("ResetsIdleAndKeepsTheDeliveryCount", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 1)
		b.idle(t, 50*time.Millisecond)
		for range 3 {
			lost, err := script.Touch(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids[0])
			if err != nil || len(lost) != 0 {
				t.Fatalf("touch: lost %v, err %v", lost, err)
			}
		}
		if owner, n := b.pending(t, b.ids[0]); owner != "dead" || n != 1 {
			t.Fatalf("pending = %s/%d, want dead/1: a touch must not count as a delivery", owner, n)
		}
		res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 40*time.Millisecond, "0-0", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 0 {
			t.Fatalf("claimed a touched entry: %+v", res.Entries)
		}
	})

	t.Run("ReportsEntriesNoLongerOwned", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 2)
		if err := b.r.Client.XAck(b.ctx, b.stream, "g", b.ids[0]).Err(); err != nil {
			t.Fatal(err)
		}
		lost, err := script.Touch(b.ctx, b.r.Client, b.stream, "g", "other", b.ids[1])
		if err != nil || len(lost) != 1 || lost[0] != b.ids[1] {
			t.Fatalf("touch by a non-owner: lost %v, err %v; want [%s]", lost, err, b.ids[1])
		}
		if owner, _ := b.pending(t, b.ids[1]); owner != "dead" {
			t.Fatalf("owner = %q after a non-owner's touch, want dead", owner)
		}
		lost, err = script.Touch(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids[0], b.ids[1])
		if err != nil || len(lost) != 1 || lost[0] != b.ids[0] {
			t.Fatalf("touch of an acked entry: lost %v, err %v; want [%s]", lost, err, b.ids[0])
		}
	})
}
