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
		if err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", []byte("p"), "h", "v"}); err != nil {
			t.Fatal(err)
		}
		got, err := b.r.Client.XRange(b.ctx, dest, "-", "+").Result()
		if err != nil || len(got) != 1 || got[0].Values["payload"] != "p" || got[0].Values["h"] != "v" {
			t.Fatalf("destination = %+v, %v; want the one entry written", got, err)
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 0 {
			t.Fatalf("pending = %+v, %v; want 0", p, err)
		}
	})

	t.Run("CopyIntoSourceStream", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		id := b.pending(t)
		if err := script.StreamMove(b.ctx, b.r.Client, b.stream, b.stream, "g", "c", id, 0, []any{"payload", "x", "settle-retry-count", "1"}); err != nil {
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
		err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", "x"})
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
			if err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, maxLen, []any{"payload", "x"}); err != nil {
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
		err := script.StreamMove(b.ctx, b.r.Client, dest, b.stream, "g", "c", id, 0, []any{"payload", "x"})
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

// pendingTo reports whether entry id of the bundle's stream is pending, and to whom.
func (b *moveBundle) pendingTo(t *testing.T, id string) string {
	t.Helper()
	p, err := b.r.Client.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: "g", Start: id, End: id, Count: 1}).Result()
	if err != nil {
		t.Fatalf("xpending %s: %v", id, err)
	}
	if len(p) == 0 {
		return ""
	}
	return p[0].Consumer
}

func TestStreamMoves(t *testing.T) {
	t.Parallel()

	t.Run("EachMoveIsCheckedAndAnsweredOnItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		mine1, taken, mine2, odd := b.pending(t), b.pending(t), b.pending(t), b.pending(t)
		if err := b.r.Client.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: "g", Consumer: "other", Messages: []string{taken}}).Err(); err != nil {
			t.Fatal(err)
		}
		moves := []script.Move{
			{ID: mine1, Values: []any{"payload", "1"}},
			{ID: taken, Values: []any{"payload", "taken"}},
			{ID: mine2, Values: []any{"payload", "2"}},
			{ID: mine1, Values: []any{"payload", "1 again"}},     // moved by the first move
			{ID: odd, Values: []any{"payload", "x", "no-value"}}, // XADD refuses an odd count
			{ID: "not-an-id", Values: []any{"payload", "x"}},     // XPENDING refuses it
		}
		errs := script.StreamMoves(b.ctx, b.r.Client, b.stream, b.stream, "g", "c", 0, moves)
		if len(errs) != len(moves) {
			t.Fatalf("%d results for %d moves", len(errs), len(moves))
		}
		for _, i := range []int{0, 2} {
			if errs[i] != nil {
				t.Fatalf("move %d: %v", i, errs[i])
			}
		}
		for _, i := range []int{1, 3} {
			if !errors.Is(errs[i], script.ErrNotOwner) {
				t.Fatalf("move %d = %v, want ErrNotOwner", i, errs[i])
			}
		}
		for _, i := range []int{4, 5} {
			if errs[i] == nil || errors.Is(errs[i], script.ErrNotOwner) {
				t.Fatalf("move %d = %v, want the command's own error", i, errs[i])
			}
		}
		got, err := b.r.Client.XRange(b.ctx, b.stream, "-", "+").Result()
		if err != nil || len(got) != 6 || got[4].Values["payload"] != "1" || got[5].Values["payload"] != "2" {
			t.Fatalf("entries = %+v, %v; want the 4 originals, then the two copies only", got, err)
		}
		for id, want := range map[string]string{mine1: "", mine2: "", taken: "other", odd: "c"} {
			if got := b.pendingTo(t, id); got != want {
				t.Fatalf("entry %s pending to %q, want %q", id, got, want)
			}
		}
	})

	t.Run("EntriesBeyondTheOwnerScanAreCheckedOnTheirOwn", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		// 80 entries pending to c: a move of the first and the last scans their range
		// for at most 2*2+32 entries, so the last is checked on its own.
		ids := make([]string, 80)
		for i := range ids {
			ids[i] = b.pending(t)
		}
		first, last := ids[0], ids[len(ids)-1]
		if err := b.r.Client.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: "g", Consumer: "other", Messages: []string{ids[70]}}).Err(); err != nil {
			t.Fatal(err)
		}
		errs := script.StreamMoves(b.ctx, b.r.Client, b.stream, b.stream, "g", "c", 0, []script.Move{
			{ID: last, Values: []any{"payload", "last"}},
			{ID: ids[70], Values: []any{"payload", "taken"}},
			{ID: first, Values: []any{"payload", "first"}},
		})
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], script.ErrNotOwner) {
			t.Fatalf("results %v; want the first and last moved, the one another consumer took refused", errs)
		}
		for id, want := range map[string]string{first: "", last: "", ids[70]: "other", ids[1]: "c"} {
			if got := b.pendingTo(t, id); got != want {
				t.Fatalf("entry %s pending to %q, want %q", id, got, want)
			}
		}
	})

	t.Run("WrongTypeDestinationFailsEveryMoveAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupMove(t)
		a, c := b.pending(t), b.pending(t)
		dest := b.r.Key("dlq")
		if err := b.r.Client.Set(b.ctx, dest, "occupied", 0).Err(); err != nil {
			t.Fatal(err)
		}
		errs := script.StreamMoves(b.ctx, b.r.Client, dest, b.stream, "g", "c", 0, []script.Move{
			{ID: a, Values: []any{"payload", "x"}}, {ID: c, Values: []any{"payload", "y"}},
		})
		for i, err := range errs {
			if err == nil {
				t.Fatalf("move %d succeeded into a string key", i)
			}
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 2 {
			t.Fatalf("pending = %+v, %v; want both originals still pending", p, err)
		}
	})
}

func TestIDAfterOrdersEntryIDsNumerically(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "LaterMillisecond", a: "10-0", b: "9-5", want: true},
		{name: "LaterSequence", a: "9-10", b: "9-9", want: true},
		{name: "Equal", a: "9-9", b: "9-9", want: false},
		{name: "Earlier", a: "9-9", b: "10-0", want: false},
		{name: "AnyIDAfterGarbage", a: "1-0", b: "x", want: true},
		{name: "GarbageAfterNothing", a: "x", b: "1-0", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := script.IDAfter(tt.a, tt.b); got != tt.want {
				t.Fatalf("IDAfter(%q, %q) = %t, want %t", tt.a, tt.b, got, tt.want)
			}
		})
	}
}
