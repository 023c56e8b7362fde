package script_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// moveBundle is one StreamMove test's stream with a group "g".
type moveBundle struct {
	ctx    context.Context
	r      *redistest.Redis
	stream string
}

func setupMove(t *testing.T) *moveBundle {
	t.Helper()
	r := redistest.New(t)
	b := &moveBundle{ctx: context.Background(), r: r, stream: r.Key("in")}
	if err := r.Client.XGroupCreateMkStream(b.ctx, b.stream, "g", "$").Err(); err != nil {
		t.Fatalf("xgroup create: %v", err)
	}
	return b
}

// pending adds an entry and delivers it to group g, returning its id.
func (b *moveBundle) pending(t *testing.T) string {
	t.Helper()
	id, err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"payload", "x"}}).Result()
	if err != nil {
		t.Fatalf("xadd: %v", err)
	}
	if err := b.r.Client.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{b.stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatalf("xreadgroup: %v", err)
	}
	return id
}

func TestStreamMove(t *testing.T) {
	t.Parallel()

	t.Run("AppendsThenAcksOriginal", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("dlq")
		newID, err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", []byte("p"), "h", "v"})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.r.Client.XRange(b.ctx, dest, "-", "+").Result()
		if err != nil || len(got) != 1 || got[0].ID != newID || got[0].Values["payload"] != "p" || got[0].Values["h"] != "v" {
			t.Fatalf("destination = %+v, %v; want the one entry %s", got, err, newID)
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 0 {
			t.Fatalf("pending = %+v, %v; want 0", p, err)
		}
	})

	t.Run("CopyIntoSourceStream", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		if _, err := script.StreamMove(b.ctx, b.r.Client, b.stream, b.stream, "g", "c", id, 0, []any{"payload", "x", "settle-retry-count", "1"}); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.r.Client.XLen(b.ctx, b.stream).Result(); n != 2 {
			t.Fatalf("stream length %d, want the original and its copy", n)
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 0 {
			t.Fatalf("pending = %+v, %v; want 0", p, err)
		}
	})

	t.Run("WrongTypeDestinationWritesNothingAndKeepsOriginalPending", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("dlq")
		if err := b.r.Client.Set(b.ctx, dest, "occupied", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", "x"})
		if err == nil {
			t.Fatal("no error moving into a string key")
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 1 {
			t.Fatalf("pending = %+v, %v; want the original still pending", p, err)
		}
		if v, _ := b.r.Client.Get(b.ctx, dest).Result(); v != "occupied" {
			t.Fatalf("destination = %q, want it untouched", v)
		}
	})

	t.Run("MaxLenTrimsDestination", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		dest := b.r.Key("dlq")
		const total, maxLen = 250, 5
		for range total {
			id := b.pending(t)
			if _, err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, maxLen, []any{"payload", "x"}); err != nil {
				t.Fatal(err)
			}
		}
		n, err := b.r.Client.XLen(b.ctx, dest).Result()
		// MAXLEN ~ trims whole macro nodes on Redis (exactly on miniredis).
		if err != nil || n < maxLen || n >= total {
			t.Fatalf("destination length %d, %v; want trimmed to about %d", n, err, maxLen)
		}
		if b.r.Mini != nil && n != maxLen {
			t.Fatalf("destination length %d on miniredis, want exactly %d", n, maxLen)
		}
	})

	t.Run("EntryTakenOverByAnotherConsumerWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		dest := b.r.Key("dlq")
		// Another consumer claims the entry (the first one stalled past min-idle).
		if err := b.r.Client.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: "g", Consumer: "other", Messages: []string{id}}).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", "x"})
		if !errors.Is(err, script.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if n, _ := b.r.Client.Exists(b.ctx, dest).Result(); n != 0 {
			t.Fatal("a dead letter was written for an entry another consumer owns")
		}
		p, err := b.r.Client.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(p) != 1 || p[0].Consumer != "other" {
			t.Fatalf("pending = %+v, %v; want the entry still pending to the consumer that took it over", p, err)
		}
	})

}
