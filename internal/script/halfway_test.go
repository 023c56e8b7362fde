package script_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// The tests of this file make one move of a batch fail in the middle (too many fields,
// a refused command) and prove that the script wrote nothing for it and settled each of
// its neighbours exactly once: Redis keeps a script's writes made before a failure, so a
// script that failed half-way would leave copies of entries it never acknowledged.

// fields returns n field/value pairs.
func fields(n int) []any {
	vs := make([]any, 0, 2*n)
	for i := range n {
		vs = append(vs, fmt.Sprintf("h%05d", i), "v")
	}
	return vs
}

// settledOnce checks that the stream holds want entries and that exactly the ids in
// pending are still pending in group g.
func settledOnce(t *testing.T, rdb *redis.Client, stream string, want int64, pending ...string) {
	t.Helper()
	ctx := context.Background()
	if n, err := rdb.XLen(ctx, stream).Result(); err != nil || n != want {
		t.Fatalf("stream %s holds %d entries (%v), want %d", stream, n, err, want)
	}
	p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range p {
		got = append(got, e.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(pending) {
		t.Fatalf("pending %v, want %v", got, pending)
	}
}

func TestStreamMovesAMoveTooLargeForAScriptFailsAloneAndItsNeighboursSettleOnce(t *testing.T) {
	t.Parallel()
	b := setupMove(t)
	ids := []string{b.pending(t), b.pending(t), b.pending(t), b.pending(t), b.pending(t)}
	moves := []script.Move{
		{ID: ids[0], Values: []any{"payload", "a"}},
		{ID: ids[1], Values: fields(4100)},                 // beyond what Lua hands one call, on every server
		{ID: ids[2], Values: fields(wire.MaxStreamFields)}, // the most a script writes
		{ID: ids[3], Values: fields(wire.MaxStreamFields + 1)},
		{ID: ids[4], Values: []any{"payload", "e"}},
	}
	errs := script.StreamMoves(b.ctx, b.r.Client, b.stream, b.stream, "g", "c", 0, moves)
	for i, err := range errs {
		refused := i == 1 || i == 3
		if (err != nil) != refused || refused && !strings.Contains(err.Error(), "TOOMANY") {
			t.Fatalf("move %d: %v; want only moves 1 and 3 refused with TOOMANY", i, err)
		}
	}
	settledOnce(t, b.r.Client, b.stream, 5+3, ids[1], ids[3])
}

func TestStreamMovesRefusedByTheACLWriteNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rules []string
		dest  string
	}{
		{name: "NoXACK", rules: []string{"+@all", "-xack"}},
		{name: "NoDeadLetterKey", rules: []string{"resetkeys", "~{p}:in", "+@all"}, dest: "{p}:dlq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.Private(t)
			b := &moveBundle{ctx: context.Background(), r: r, stream: r.Key("in")}
			if err := r.Client.XGroupCreateMkStream(b.ctx, b.stream, "g", "$").Err(); err != nil {
				t.Fatal(err)
			}
			ids := []string{b.pending(t), b.pending(t), b.pending(t)}
			user := r.User(t, "settle-"+strings.ToLower(tc.name), tc.rules...)
			dest := b.stream
			if tc.dest != "" {
				dest = tc.dest
			}
			var moves []script.Move
			for _, id := range ids {
				moves = append(moves, script.Move{ID: id, Values: []any{"payload", "x"}})
			}
			for i, err := range script.StreamMoves(b.ctx, user, dest, b.stream, "g", "c", 0, moves) {
				if err == nil || !strings.Contains(err.Error(), "NOPERM") {
					t.Fatalf("move %d: %v, want NOPERM", i, err)
				}
			}
			settledOnce(t, r.Client, b.stream, 3, ids...)
			if n, _ := r.Client.Exists(b.ctx, "{p}:dlq").Result(); n != 0 {
				t.Fatal("a dead letter was written")
			}
		})
	}
}

// moveLists prepares a processing list holding items, and returns its key.
func moveLists(t *testing.T, r *redistest.Redis, items ...string) string {
	t.Helper()
	proc := r.Key("proc")
	vals := make([]any, len(items))
	for i, it := range items {
		vals[i] = it
	}
	if err := r.Client.RPush(context.Background(), proc, vals...).Err(); err != nil {
		t.Fatal(err)
	}
	return proc
}

// lrange returns the items of key.
func lrange(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	got, err := rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The acknowledgements of a batch go in pieces of 4,000 ids: a batch of more moves than
// Lua unpacks into one call still settles each of them exactly once.
func TestStreamMovesABatchBeyondLuasUnpackLimitMovesEachEntryOnce(t *testing.T) {
	t.Parallel()
	b := setupMove(t)
	n := 5200 // more values than one Lua call takes on miniredis (about 5,100)
	if redistest.Real() {
		n = 8100 // and on Redis 7.0 (7,998)
	}
	p := b.r.Client.Pipeline()
	for i := range n {
		p.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"payload", fmt.Sprint(i)}})
	}
	if _, err := p.Exec(b.ctx); err != nil {
		t.Fatal(err)
	}
	read, err := b.r.Client.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{b.stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(read[0].Messages) != n {
		t.Fatalf("xreadgroup: %v", err)
	}
	moves := make([]script.Move, n)
	for i, e := range read[0].Messages {
		moves[i] = script.Move{ID: e.ID, Values: []any{"payload", e.Values["payload"]}}
	}
	dest := b.r.Key("dlq")
	for i, err := range script.StreamMoves(b.ctx, patient(t, b.r.Client), dest, b.stream, "g", "c", 0, moves) {
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
	}
	if got, err := b.r.Client.XLen(b.ctx, dest).Result(); err != nil || got != int64(n) {
		t.Fatalf("destination holds %d entries (%v), want %d", got, err, n)
	}
	settledOnce(t, b.r.Client, b.stream, int64(n))
}

// patient returns a client of c's server that waits a minute for a reply: one call of
// thousands of moves takes seconds on miniredis under the race detector (go-redis
// would otherwise time out and run the script again).
func patient(t *testing.T, c *redis.Client) *redis.Client {
	t.Helper()
	o := c.Options()
	p := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Username: o.Username, Password: o.Password, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestListMovesABatchBeyondLuasUnpackLimitMovesEachItemOnce(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	n := 5200 // more values than one Lua call takes on miniredis (about 5,100)
	if redistest.Real() {
		n = 8100 // and on Redis 7.0 (7,998)
	}
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("item-%d", i)
	}
	proc := moveLists(t, r, items...)
	dest := r.Key("list")
	moves := make([]script.ListMove, n)
	for i, it := range items {
		moves[i] = script.ListMove{Dest: dest, Item: it, Value: []byte(it)}
	}
	for i, err := range script.ListMoves(context.Background(), patient(t, r.Client), proc, moves) {
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
	}
	if got := lrange(t, r.Client, dest); fmt.Sprint(got) != fmt.Sprint(items) {
		t.Fatalf("destination holds %d items, want the %d moved in order", len(got), n)
	}
	if got := lrange(t, r.Client, proc); len(got) != 0 {
		t.Fatalf("processing list holds %d items, want none", len(got))
	}
}

// Redis 7 checks an EVAL's keys against the user's key patterns before the script runs
// (all or nothing), so a refusal inside a script is a command's: without RPUSH, every
// move is refused and no item leaves the processing list.
func TestListMovesRefusedByTheACLTakeNothingFromTheProcessingList(t *testing.T) {
	t.Parallel()
	r := redistest.Private(t)
	proc := moveLists(t, r, "a1", "b1", "a2")
	a, b := r.Key("a"), r.Key("b")
	user := r.User(t, "settle-list-move", "+@all", "-rpush")
	moves := []script.ListMove{
		{Dest: a, Item: "a1", Value: []byte("a1")},
		{Dest: b, Item: "b1", Value: []byte("b1")},
		{Dest: a, Item: "a2", Value: []byte("a2")},
	}
	for i, err := range script.ListMoves(context.Background(), user, proc, moves) {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("move %d: %v, want NOPERM", i, err)
		}
	}
	if got := lrange(t, r.Client, proc); fmt.Sprint(got) != "[a1 b1 a2]" {
		t.Fatalf("processing list holds %v, want every item still there", got)
	}
	if n, _ := r.Client.Exists(context.Background(), a, b).Result(); n != 0 {
		t.Fatal("a destination was written")
	}
}

func TestSweepOfAMemberWithTooManyFieldsMovesItWholeAndTheOthersAsTheyAre(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	set, stream := r.Key("delays"), r.Key("in")
	headers := map[string]string{}
	for i := range 4100 { // beyond what Lua hands one call, on every server
		headers[fmt.Sprintf("h%05d", i)] = "v"
	}
	big := wire.DelayMember("1-1", []byte("big"), headers)
	small := wire.DelayMember("1-2", []byte("small"), map[string]string{"h": "v"})
	if err := r.Client.ZAdd(ctx, set, redis.Z{Score: 1, Member: big}, redis.Z{Score: 2, Member: small}).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := script.Sweep(ctx, r.Client, set, stream, 10, script.SweepBatch, wire.FieldPayload)
	if err != nil || res.Moved != 2 {
		t.Fatalf("sweep = %+v, %v; want both members moved", res, err)
	}
	got, err := r.Client.XRange(ctx, stream, "-", "+").Result()
	if err != nil || len(got) != 2 {
		t.Fatalf("stream = %d entries, %v; want 2", len(got), err)
	}
	if got[0].Values[wire.FieldPayload] != big || len(got[0].Values) != 1 {
		t.Fatalf("the big member was not written whole as the payload: %d fields", len(got[0].Values))
	}
	if got[1].Values[wire.FieldPayload] != "small" || got[1].Values["h"] != "v" {
		t.Fatalf("the small member was written as %v", got[1].Values)
	}
	if n, _ := r.Client.ZCard(ctx, set).Result(); n != 0 {
		t.Fatalf("the set holds %d members, want none", n)
	}
}

func TestSweepAndParkRefusedByTheACLWriteNothing(t *testing.T) {
	t.Parallel()
	r := redistest.Private(t)
	ctx := context.Background()
	set, stream := r.Key("delays"), r.Key("in")

	t.Run("SweepWithoutZREM", func(t *testing.T) {
		member := wire.DelayMember("1-1", []byte("x"), nil)
		if err := r.Client.ZAdd(ctx, set, redis.Z{Score: 1, Member: member}).Err(); err != nil {
			t.Fatal(err)
		}
		user := r.User(t, "settle-sweep", "+@all", "-zrem")
		if _, err := script.Sweep(ctx, user, set, stream, 10, script.SweepBatch, wire.FieldPayload); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("sweep: %v, want NOPERM", err)
		}
		if n, _ := r.Client.XLen(ctx, stream).Result(); n != 0 {
			t.Fatalf("the stream holds %d entries, want none", n)
		}
		if n, _ := r.Client.ZCard(ctx, set).Result(); n != 1 {
			t.Fatalf("the set holds %d members, want the one still parked", n)
		}
		r.Client.Del(ctx, set)
	})

	t.Run("ParkWithoutXACK", func(t *testing.T) {
		b := &moveBundle{ctx: ctx, r: r, stream: stream}
		if err := r.Client.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
			t.Fatal(err)
		}
		id := b.pending(t)
		user := r.User(t, "settle-park", "+@all", "-xack")
		if _, err := script.Park(ctx, user, set, stream, "g", "c", id, "member", 0, 0, -1); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("park: %v, want NOPERM", err)
		}
		if n, _ := r.Client.ZCard(ctx, set).Result(); n != 0 {
			t.Fatalf("the set holds %d members, want none", n)
		}
		settledOnce(t, r.Client, stream, 1, id)
	})
}
