package script_test

import (
	"context"
	"errors"
	"testing"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

func TestListReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setup returns a processing list holding "item" and the reply list's key.
	setup := func(t *testing.T) (r *redistest.Redis, processing, dest string) {
		t.Helper()
		r = redistest.New(t)
		processing, dest = r.Key("processing"), r.Key("replies")
		if err := r.Client.RPush(ctx, processing, "item").Err(); err != nil {
			t.Fatal(err)
		}
		return r, processing, dest
	}
	lens := func(t *testing.T, r *redistest.Redis, processing, dest string) (int64, int64) {
		t.Helper()
		p, err1 := r.Client.LLen(ctx, processing).Result()
		d, err2 := r.Client.LLen(ctx, dest).Result()
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		return p, d
	}

	t.Run("TakesTheItemAndPushesEveryReplyInOrder", func(t *testing.T) {
		t.Parallel()
		r, processing, dest := setup(t)
		if err := script.ListReply(ctx, r.Client, processing, dest, "item", [][]byte{[]byte("one"), []byte("two")}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := r.Client.LRange(ctx, dest, 0, -1).Result()
		if err != nil || len(got) != 2 || got[0] != "one" || got[1] != "two" {
			t.Fatalf("replies = %v, %v; want one, two", got, err)
		}
		if p, _ := lens(t, r, processing, dest); p != 0 {
			t.Fatalf("processing list holds %d, want 0", p)
		}
	})

	t.Run("RecoveredItemWritesNothing", func(t *testing.T) {
		t.Parallel()
		r, processing, dest := setup(t)
		err := script.ListReply(ctx, r.Client, processing, dest, "another", [][]byte{[]byte("one")}, nil)
		if !errors.Is(err, script.ErrItemGone) {
			t.Fatalf("err = %v, want ErrItemGone", err)
		}
		if p, d := lens(t, r, processing, dest); p != 1 || d != 0 {
			t.Fatalf("processing %d, replies %d; want 1 and 0", p, d)
		}
	})

	t.Run("WrongTypeReplyListWritesNothing", func(t *testing.T) {
		t.Parallel()
		r, processing, dest := setup(t)
		if err := r.Client.Set(ctx, dest, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := script.ListReply(ctx, r.Client, processing, dest, "item", [][]byte{[]byte("one")}, nil); err == nil {
			t.Fatal("err = nil, want WRONGTYPE")
		}
		if n, err := r.Client.LLen(ctx, processing).Result(); err != nil || n != 1 {
			t.Fatalf("processing list holds %d (%v), want the item kept", n, err)
		}
	})
}
