package script_test

import (
	"errors"
	"testing"

	"github.com/settlekit/settle/internal/script"
)

func TestStreamReply(t *testing.T) {
	t.Parallel()

	// pendingCount returns how many entries of b's stream are pending in group g.
	pendingCount := func(t *testing.T, b *moveBundle) int64 {
		t.Helper()
		p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		return p.Count
	}
	// untouched checks that a refused reply wrote nothing and left the entry pending.
	untouched := func(t *testing.T, b *moveBundle, dest string) {
		t.Helper()
		if n, err := b.r.Client.XLen(b.ctx, dest).Result(); err != nil || n != 0 {
			t.Fatalf("%d replies written (%v), want 0", n, err)
		}
		if n := pendingCount(t, b); n != 1 {
			t.Fatalf("%d pending, want the entry still pending", n)
		}
	}

	t.Run("AppendsEveryReplyInOrderThenAcks", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("replies")
		replies := [][]any{{"payload", "one", "h", "1"}, {"payload", "two"}}
		if err := script.StreamReply(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, replies, nil); err != nil {
			t.Fatal(err)
		}
		got, err := b.r.Client.XRange(b.ctx, dest, "-", "+").Result()
		if err != nil || len(got) != 2 || got[0].Values["payload"] != "one" || got[0].Values["h"] != "1" || got[1].Values["payload"] != "two" {
			t.Fatalf("replies = %+v, %v; want one then two", got, err)
		}
		if n := pendingCount(t, b); n != 0 {
			t.Fatalf("%d pending, want 0", n)
		}
	})

	t.Run("NotOwnerWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("replies")
		err := script.StreamReply(b.ctx, b.r.Client, dest, b.stream, "g", "other", id, [][]any{{"payload", "one"}}, nil)
		if !errors.Is(err, script.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		untouched(t, b, dest)
	})

	t.Run("WrongTypeDestinationWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("replies")
		if err := b.r.Client.Set(b.ctx, dest, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := script.StreamReply(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, [][]any{{"payload", "one"}}, nil); err == nil {
			t.Fatal("err = nil, want WRONGTYPE")
		}
		if n := pendingCount(t, b); n != 1 {
			t.Fatalf("%d pending, want the entry still pending", n)
		}
	})

	t.Run("MalformedSecondReplyWritesNeither", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("replies")
		err := script.StreamReply(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, [][]any{{"payload", "one"}, {"payload"}}, nil)
		if err == nil {
			t.Fatal("err = nil, want BADREPLY")
		}
		untouched(t, b, dest) // the first must not be written alone
	})
}
