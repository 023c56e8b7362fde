package script_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

type testBundle struct {
	ctx    context.Context
	r      *redistest.Redis
	set    string
	stream string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	r := redistest.New(t)
	return &testBundle{ctx: context.Background(), r: r, set: r.Key("delayed"), stream: r.Key("in")}
}

// pending adds an entry to the stream and delivers it to group g, returning its id.
func (b *testBundle) pending(t *testing.T) string {
	t.Helper()
	rdb := b.r.Client
	if err := rdb.XGroupCreateMkStream(b.ctx, b.stream, "g", "$").Err(); err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
		t.Fatalf("xgroup create: %v", err)
	}
	id, err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"payload", "x"}}).Result()
	if err != nil {
		t.Fatalf("xadd: %v", err)
	}
	if err := rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{b.stream, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatalf("xreadgroup: %v", err)
	}
	return id
}

func TestPark(t *testing.T) {
	t.Parallel()

	t.Run("AddsCopyScoredByNowPlusDelayAndAcksOriginal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pending(t)
		member := wire.DelayMember(id, []byte("p"), map[string]string{"settle-retry-count": "1"})
		due, err := script.Park(b.ctx, b.r.Client, b.set, b.stream, "g", "c", id, member, 30*time.Second, 0, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		if due != 1_030_000 {
			t.Fatalf("due = %d, want 1030000", due)
		}
		score, err := b.r.Client.ZScore(b.ctx, b.set, member).Result()
		if err != nil || score != 1_030_000 {
			t.Fatalf("zscore = %v, %v; want 1030000", score, err)
		}
		p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result()
		if err != nil || p.Count != 0 {
			t.Fatalf("pending = %+v, %v; want none (original acknowledged)", p, err)
		}
	})

	t.Run("UsesServerTimeWithoutNowArgument", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if b.r.Mini != nil {
			b.r.Mini.SetTime(time.UnixMilli(5_000_000))
		}
		id := b.pending(t)
		server, err := b.r.Client.Time(b.ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		due, err := script.Park(b.ctx, b.r.Client, b.set, b.stream, "g", "c", id, wire.DelayMember(id, []byte("p"), nil), time.Second, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		want := server.UnixMilli() + 1000
		if due < want || due > want+5000 {
			t.Fatalf("due = %d, want about server TIME + 1s = %d", due, want)
		}
	})

	t.Run("SetsTTLWhenGiven", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pending(t)
		if _, err := script.Park(b.ctx, b.r.Client, b.set, b.stream, "g", "c", id, wire.DelayMember(id, []byte("p"), nil), time.Second, time.Hour, -1); err != nil {
			t.Fatal(err)
		}
		ttl, err := b.r.Client.PTTL(b.ctx, b.set).Result()
		if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("pttl = %v, %v; want about 1h", ttl, err)
		}
	})

	t.Run("EntryTakenOverByAnotherConsumerWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.pending(t)
		if err := b.r.Client.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.stream, Group: "g", Consumer: "other", Messages: []string{id}}).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := script.Park(b.ctx, b.r.Client, b.set, b.stream, "g", "c", id, wire.DelayMember(id, []byte("p"), nil), time.Second, 0, -1)
		if !errors.Is(err, script.ErrNotOwner) {
			t.Fatalf("err = %v, want ErrNotOwner", err)
		}
		if n, _ := b.r.Client.ZCard(b.ctx, b.set).Result(); n != 0 {
			t.Fatalf("delay set holds %d members, want none for an entry another consumer owns", n)
		}
	})

	t.Run("WrongTypeStreamWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := b.r.Client.Set(b.ctx, b.set, "occupied", 0).Err(); err != nil {
			t.Fatal(err)
		}
		id := b.pending(t)
		if _, err := script.Park(b.ctx, b.r.Client, b.set, b.stream, "g", "c", id, wire.DelayMember(id, []byte("p"), nil), time.Second, 0, -1); err == nil {
			t.Fatal("no error parking into a string key")
		}
		if p, err := b.r.Client.XPending(b.ctx, b.stream, "g").Result(); err != nil || p.Count != 1 {
			t.Fatalf("pending = %+v, %v; want the original still pending", p, err)
		}
	})

}

func TestSweep(t *testing.T) {
	t.Parallel()

	t.Run("MovesOnlyDueMembersWithNewIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 100, Member: wire.DelayMember("1-1", []byte("a"), map[string]string{"h": "1"})})
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 300, Member: wire.DelayMember("1-2", []byte("b"), nil)})
		res, err := script.Sweep(b.ctx, rdb, b.set, b.stream, 200, script.SweepBatch, wire.FieldPayload)
		if err != nil {
			t.Fatal(err)
		}
		if res != (script.SweepResult{Moved: 1, Next: 300, Now: 200}) {
			t.Fatalf("sweep = %+v, want moved 1, next 300, now 200", res)
		}
		msgs, err := rdb.XRange(b.ctx, b.stream, "-", "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("stream = %v, %v; want one entry", msgs, err)
		}
		if msgs[0].ID == "1-1" {
			t.Fatalf("moved entry kept its old id")
		}
		payload, ok, headers := wire.FromStream(msgs[0].Values)
		if !ok || string(payload) != "a" || headers["h"] != "1" || len(headers) != 1 {
			t.Fatalf("moved entry = %q %v %v", payload, ok, headers)
		}
		res, err = script.Sweep(b.ctx, rdb, b.set, b.stream, 300, script.SweepBatch, wire.FieldPayload)
		if err != nil || res != (script.SweepResult{Moved: 1, Next: -1, Now: 300}) {
			t.Fatalf("second sweep = %+v, %v; want moved 1, next -1", res, err)
		}
		if n, _ := rdb.Exists(b.ctx, b.set).Result(); n != 0 {
			t.Fatalf("set still exists after the last member moved")
		}
	})

	t.Run("IsBinarySafe", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		payloads := [][]byte{{0x00}, {0xff, 0xfe, 0x00, 0x80}, []byte("12:34\n5:"), {}, []byte("é\x00\xc3")}
		for i, p := range payloads {
			rdb.ZAdd(b.ctx, b.set, redis.Z{Score: float64(i), Member: wire.DelayMember(fmt.Sprintf("1-%d", i), p, map[string]string{"k\x00:": "v\n\xff"})})
		}
		res, err := script.Sweep(b.ctx, rdb, b.set, b.stream, 100, script.SweepBatch, wire.FieldPayload)
		if err != nil || res.Moved != len(payloads) {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
		msgs, err := rdb.XRange(b.ctx, b.stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range msgs {
			payload, ok, headers := wire.FromStream(m.Values)
			if !ok || string(payload) != string(payloads[i]) || headers["k\x00:"] != "v\n\xff" {
				t.Fatalf("entry %d = %q %v %q, want %q", i, payload, ok, headers, payloads[i])
			}
		}
	})

	t.Run("MovesBoundedBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		for i := 0; i < script.SweepBatch+5; i++ {
			rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 1, Member: wire.DelayMember(fmt.Sprintf("1-%d", i), []byte("p"), nil)})
		}
		res, err := script.Sweep(b.ctx, rdb, b.set, b.stream, 10, script.SweepBatch, wire.FieldPayload)
		if err != nil || res.Moved != script.SweepBatch || res.Next != 1 {
			t.Fatalf("first sweep = %+v, %v; want a full batch and next 1", res, err)
		}
		res, err = script.Sweep(b.ctx, rdb, b.set, b.stream, 10, script.SweepBatch, wire.FieldPayload)
		if err != nil || res.Moved != 5 || res.Next != -1 {
			t.Fatalf("second sweep = %+v, %v; want 5 and next -1", res, err)
		}
	})

	t.Run("KeepsGarbledMemberAsPayload", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 1, Member: "not a member"})
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 1, Member: "1-1\n99:short"})
		res, err := script.Sweep(b.ctx, rdb, b.set, b.stream, 10, script.SweepBatch, wire.FieldPayload)
		if err != nil || res.Moved != 2 {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
		msgs, _ := rdb.XRange(b.ctx, b.stream, "-", "+").Result()
		got := map[string]bool{}
		for _, m := range msgs {
			p, _, _ := wire.FromStream(m.Values)
			got[string(p)] = true
		}
		if !got["not a member"] || !got["1-1\n99:short"] {
			t.Fatalf("stream payloads = %v, want both garbled members kept whole", got)
		}
	})

	t.Run("MovesEachMemberOnceWithConcurrentSweepers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		const n = 500
		for i := 0; i < n; i++ {
			rdb.ZAdd(b.ctx, b.set, redis.Z{Score: float64(i), Member: wire.DelayMember(fmt.Sprintf("1-%d", i), []byte(fmt.Sprint(i)), nil)})
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for w := 0; w < 8; w++ {
			wg.Go(func() {
				for {
					res, err := script.Sweep(b.ctx, rdb, b.set, b.stream, n, 7, wire.FieldPayload)
					if err != nil {
						t.Errorf("sweep: %v", err)
						return
					}
					mu.Lock()
					total += res.Moved
					mu.Unlock()
					if res.Moved == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		msgs, _ := rdb.XRange(b.ctx, b.stream, "-", "+").Result()
		seen := map[string]int{}
		for _, m := range msgs {
			p, _, _ := wire.FromStream(m.Values)
			seen[string(p)]++
		}
		if total != n || len(msgs) != n || len(seen) != n {
			t.Fatalf("moved %d, stream has %d entries, %d distinct; want %d each", total, len(msgs), len(seen), n)
		}
	})
}
