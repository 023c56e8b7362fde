package script_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
)

func TestDeadLetterPending(t *testing.T) {
	t.Parallel()

	t.Run("AppendsTheDeadLetterAndAcksTheEntry", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 2)
		dlq := b.r.Key("dlq")
		deadID, written, err := script.DeadLetterPending(b.ctx, b.r.Client, b.stream, dlq, "g", b.ids[0], []any{"payload", "p", "settle-dead-reason", "op"})
		if err != nil || !written || deadID == "" {
			t.Fatalf("DeadLetterPending = %q, %v, %v; want a dead letter written", deadID, written, err)
		}
		got, err := b.r.Client.XRange(b.ctx, dlq, deadID, deadID).Result()
		if err != nil || len(got) != 1 || got[0].Values["settle-dead-reason"] != "op" {
			t.Fatalf("dead letter %v, %v; want the values given", got, err)
		}
		p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result()
		if err != nil || p.Count != 1 || p.Lower != b.ids[1] {
			t.Fatalf("pending %+v, %v; want only %s (the other acked)", p, err, b.ids[1])
		}
	})

	t.Run("AnEntryNoLongerPendingWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 1)
		dlq := b.r.Key("dlq")
		for n := range 2 {
			_, written, err := script.DeadLetterPending(b.ctx, b.r.Client, b.stream, dlq, "g", b.ids[0], []any{"payload", "p"})
			if err != nil || written != (n == 0) {
				t.Fatalf("call %d: written %v, %v; want written only the first time", n+1, written, err)
			}
		}
		if n, _ := b.r.Client.XLen(b.ctx, dlq).Result(); n != 1 {
			t.Fatalf("dead-letter stream length %d, want 1 (one dead letter, not two)", n)
		}
	})

	t.Run("RefusesADeadLetterKeyOfTheWrongTypeBeforeWriting", func(t *testing.T) {
		t.Parallel()
		b := setupClaim(t, 1)
		str := b.r.Key("string")
		if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, _, err := script.DeadLetterPending(b.ctx, b.r.Client, b.stream, str, "g", b.ids[0], []any{"payload", "p"})
		if err == nil || !strings.Contains(err.Error(), str) || !strings.Contains(err.Error(), "holds a string") {
			t.Fatalf("DeadLetterPending to a string: %v, want an error naming it", err)
		}
		if owner, _ := b.pending(t, b.ids[0]); owner != "dead" {
			t.Fatalf("entry pending at %q, want still at dead", owner)
		}
	})
}

// A release by an operator takes one delivery off and makes the entry claimable at
// once; a second release of the same entry changes nothing more.
func TestReleasePendingTakesOneDeliveryOffOnceAndMakesTheEntryClaimable(t *testing.T) {
	t.Parallel()
	b := setupClaim(t, 3)
	// ids[1] was claimed once more (delivered twice); ids[2] is acked.
	if err := b.r.Client.XClaimJustID(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: "g", Consumer: "dead", Messages: []string{b.ids[1]}}).Err(); err != nil {
		t.Fatal(err)
	}
	_, before := b.pending(t, b.ids[1])
	if err := b.r.Client.XAck(b.ctx, b.stream, "g", b.ids[2]).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := script.ReleasePending(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids...)
	if err != nil || len(res.Released) != 2 || len(res.Already) != 0 || len(res.Lost) != 1 || res.Lost[0] != b.ids[2] {
		t.Fatalf("first release %+v, %v; want 2 released, %s lost", res, err, b.ids[2])
	}
	again, err := script.ReleasePending(b.ctx, b.r.Client, b.stream, "g", "dead", b.ids[:2]...)
	if err != nil || len(again.Released) != 0 || len(again.Already) != 2 {
		t.Fatalf("second release %+v, %v; want both already released", again, err)
	}
	if _, n := b.pending(t, b.ids[0]); n != 0 {
		t.Fatalf("%s delivery count %d after two releases, want 0", b.ids[0], n)
	}
	if _, n := b.pending(t, b.ids[1]); n != before-1 {
		t.Fatalf("%s delivery count %d after two releases, want %d (one off, not two)", b.ids[1], n, before-1)
	}
	claimed, err := script.Claim(b.ctx, b.r.Client, b.stream, "g", "me", time.Hour, "0-0", 10)
	if err != nil || len(claimed.Entries) != 2 {
		t.Fatalf("claim with an hour's min-idle took %+v, %v; want both released entries at once", claimed.Entries, err)
	}
}

func TestPromoteDelayedMakesMembersDueNowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UnixMilli()
	if err := b.r.Client.ZAdd(b.ctx, b.set,
		redis.Z{Score: float64(now + 3_600_000), Member: "later"},
		redis.Z{Score: float64(now - 1000), Member: "due"}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := script.PromoteDelayed(b.ctx, b.r.Client, b.set, now, "later", "due", "gone")
	want := []script.Promotion{script.PromotionDone, script.PromotionDue, script.PromotionGone}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("PromoteDelayed = %v, %v; want %v", got, err, want)
	}
	if s, _ := b.r.Client.ZScore(b.ctx, b.set, "later").Result(); int64(s) != now {
		t.Fatalf("later scored %d, want now %d", int64(s), now)
	}
	if s, _ := b.r.Client.ZScore(b.ctx, b.set, "due").Result(); int64(s) != now-1000 {
		t.Fatalf("due rescored to %d, want left at %d", int64(s), now-1000)
	}
	if again, err := script.PromoteDelayed(b.ctx, b.r.Client, b.set, now, "later"); err != nil || again[0] != script.PromotionDue {
		t.Fatalf("second promote = %v, %v; want due already", again, err)
	}
	if n, _ := b.r.Client.ZCard(b.ctx, b.set).Result(); n != 2 {
		t.Fatalf("set holds %d, want 2 (gone not added)", n)
	}
	res, err := script.Sweep(b.ctx, b.r.Client, b.set, b.stream, now, 10, "payload")
	if err != nil || res.Moved != 2 {
		t.Fatalf("sweep after promote moved %+v, %v; want both", res, err)
	}
}
