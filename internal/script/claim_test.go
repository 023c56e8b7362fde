package script_test

import (
	"context"
	"fmt"
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

// TestClaimScansOnWithinOneCallWhileItClaimsNothing: a scan for a lot of one (a
// taken-over delivery runs alone) goes on past the ten entries one XAUTOCLAIM examines,
// within one call, so that a pass over a few hundred entries in flight is one round
// trip, not one per ten entries.
func TestClaimScansOnWithinOneCallWhileItClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 301)
	idle := b.ids[300]
	if err := b.r.Client.Do(b.ctx, "XCLAIM", b.stream, "g", "dead", 0, idle, "IDLE", time.Hour.Milliseconds(), "RETRYCOUNT", 1, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", time.Minute, "0-0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 1 || res.Entries[0].ID != idle {
		t.Fatalf("one call claimed %d entries (next %q); want the idle one behind 300 busy ones, %s", len(res.Entries), res.Next, idle)
	}
	if owner, _ := b.pending(t, b.ids[0]); owner != "dead" {
		t.Fatalf("a busy entry went to %q", owner)
	}
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
		b.idle(t, 10*time.Minute)
		for range 3 {
			lost, err := script.Touch(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids[0])
			if err != nil || len(lost) != 0 {
				t.Fatalf("touch: lost %v, err %v", lost, err)
			}
		}
		if owner, n := b.pending(t, b.ids[0]); owner != "dead" || n != 1 {
			t.Fatalf("pending = %s/%d, want dead/1: a touch must not count as a delivery", owner, n)
		}
		res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 5*time.Minute, "0-0", 10)
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

// setCount makes id pending at owner with delivery count n and idle time idle.
func (b *claimBundle) setCount(t *testing.T, id, owner string, n int, idle time.Duration) {
	t.Helper()
	if err := b.r.Client.Do(b.ctx, "XCLAIM", b.stream, "g", owner, 0, id, "IDLE", idle.Milliseconds(), "RETRYCOUNT", n, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
}

func TestClaimReadsEachEntrysOwnCountPastTheConsumersOtherEntries(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 6)
	// "me" already holds ids[1] and ids[3] (not idle); the idle ones between them have
	// counts of their own.
	for i, id := range b.ids {
		if i == 1 || i == 3 {
			b.setCount(t, id, "me", 7, 0)
		} else {
			b.setCount(t, id, "dead", i+1, 10*time.Minute)
		}
	}
	res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 5*time.Minute, "0-0", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{b.ids[0]: 2, b.ids[2]: 4, b.ids[4]: 6, b.ids[5]: 7}
	if len(res.Entries) != len(want) {
		t.Fatalf("claimed %d entries, want %d", len(res.Entries), len(want))
	}
	for i, e := range res.Entries {
		if res.Counts[i] != want[e.ID] {
			t.Fatalf("count of %s = %d, want %d (its own count plus the claim)", e.ID, res.Counts[i], want[e.ID])
		}
	}
	for _, i := range []int{1, 3} {
		if owner, n := b.pending(t, b.ids[i]); owner != "me" || n != 7 {
			t.Fatalf("entry not claimed: pending %s/%d, want me/7", owner, n)
		}
	}
}

func TestTouchResetsManyEntriesInAnyOrderKeepingEachCount(t *testing.T) {
	t.Parallel()
	// 40 entries of "dead", each with its own count; a touch of 3 of them (the range
	// between them holds more of dead's entries than one XPENDING is asked for) in
	// reverse order, plus one it no longer owns.
	b := setupClaim(t, 40)
	for i, id := range b.ids {
		b.setCount(t, id, "dead", i%3+1, 10*time.Minute)
	}
	b.setCount(t, b.ids[20], "other", 9, 10*time.Minute)
	touched := []string{b.ids[39], b.ids[20], b.ids[7], b.ids[0]}
	lost, err := script.Touch(b.ctx, b.r.Client, b.stream, "g", "dead", touched...)
	if err != nil || len(lost) != 1 || lost[0] != b.ids[20] {
		t.Fatalf("touch: lost %v, err %v; want [%s]", lost, err, b.ids[20])
	}
	for _, i := range []int{0, 7, 39} {
		if owner, n := b.pending(t, b.ids[i]); owner != "dead" || n != int64(i%3+1) {
			t.Fatalf("touched %s: pending %s/%d, want dead/%d", b.ids[i], owner, n, i%3+1)
		}
	}
	// Only the touched entries are too recent to claim.
	res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", 5*time.Minute, "0-0", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 37 {
		t.Fatalf("claimed %d entries after the touch, want 37 (all but the 3 touched)", len(res.Entries))
	}
	for _, e := range res.Entries {
		if e.ID == b.ids[0] || e.ID == b.ids[7] || e.ID == b.ids[39] {
			t.Fatalf("claimed touched entry %s", e.ID)
		}
	}
}

func TestClaimIDsTakesOnlyTheListedEntriesStillOwnedAndIdleLongEnough(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 7)
	b.setCount(t, b.ids[0], "me", 2, 10*time.Minute)
	b.setCount(t, b.ids[1], "me", 1, 0) // not idle long enough
	b.setCount(t, b.ids[2], "me", 3, 10*time.Minute)
	b.setCount(t, b.ids[3], "me", 1, 10*time.Minute)    // in flight at "me"
	b.setCount(t, b.ids[4], "me", 1, 10*time.Minute)    // idle but not listed
	b.setCount(t, b.ids[6], "other", 1, 10*time.Minute) // taken over by another consumer
	if err := b.r.Client.XAck(b.ctx, b.stream, "g", b.ids[5]).Err(); err != nil {
		t.Fatal(err)
	}
	listed := []string{b.ids[6], b.ids[5], b.ids[3], b.ids[2], b.ids[1], b.ids[0]}
	res, err := script.ClaimIDs(b.ctx, b.r.Client, b.stream, "g", "me", 5*time.Minute, listed, b.ids[3])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i, e := range res.Entries {
		got[e.ID] = res.Counts[i]
		if e.Values["payload"] != "p" {
			t.Fatalf("entry %s without its fields: %+v", e.ID, e)
		}
	}
	if len(got) != 2 || got[b.ids[0]] != 3 || got[b.ids[2]] != 4 {
		t.Fatalf("claimed %v, want %s:3 and %s:4 (the listed idle ones, with their counts plus the claim)", got, b.ids[0], b.ids[2])
	}
	for i, want := range map[int]string{1: "me/1", 3: "me/1", 4: "me/1", 6: "other/1"} {
		if owner, n := b.pending(t, b.ids[i]); fmt.Sprintf("%s/%d", owner, n) != want {
			t.Fatalf("%s: pending %s/%d, want %s (left alone)", b.ids[i], owner, n, want)
		}
	}
}

// A released entry stays pending at its consumer with the never-run delivery taken off
// its count, idle past any min-idle: the next claim takes it at its first delivery's
// count. An entry no longer pending there is reported and left alone.
func TestReleaseHandsBackAnEntryAsIfNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 2)
	if err := b.r.Client.XAck(b.ctx, b.stream, "g", b.ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	lost, err := script.Release(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids...)
	if err != nil || len(lost) != 1 || lost[0] != b.ids[1] {
		t.Fatalf("release: lost %v, err %v; want [%s] (acked)", lost, err, b.ids[1])
	}
	if owner, n := b.pending(t, b.ids[0]); owner != "dead" || n != 0 {
		t.Fatalf("released entry pending %s/%d, want dead/0", owner, n)
	}
	res, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", time.Hour, "0-0", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 1 || res.Entries[0].ID != b.ids[0] || res.Counts[0] != 1 {
		t.Fatalf("claimed %+v (counts %v), want %s at once with count 1", res.Entries, res.Counts, b.ids[0])
	}
}
