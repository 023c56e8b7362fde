package script_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

func TestParkValue(t *testing.T) {
	t.Parallel()

	t.Run("PlainParkAddsMemberScoredByNowPlusDelay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		member := wire.ValueDelayMember("tok", wire.Envelope([]byte("p"), map[string]string{"settle-retry-count": "1"}))
		due, parked, err := script.ParkValue(b.ctx, b.r.Client, b.set, "", "", member, 30*time.Second, time.Hour, 1_000_000)
		if err != nil || !parked || due != 1_030_000 {
			t.Fatalf("park = %d %v %v, want due 1030000", due, parked, err)
		}
		zs, err := b.r.Client.ZRangeWithScores(b.ctx, b.set, 0, -1).Result()
		if err != nil || len(zs) != 1 || zs[0].Score != 1_030_000 || zs[0].Member != member {
			t.Fatalf("set = %v, %v; want the member at 1030000", zs, err)
		}
		if ttl, _ := b.r.Client.PTTL(b.ctx, b.set).Result(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("pttl = %v, want about 1h", ttl)
		}
	})

	t.Run("ServerTimeWhenNoNowIsGiven", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := time.Now().Add(-time.Minute).UnixMilli()
		due, _, err := script.ParkValue(b.ctx, b.r.Client, b.set, "", "", "t\nv", time.Second, 0, -1)
		if err != nil || due < before+1000 {
			t.Fatalf("park = %d, %v; want a due time from the server's clock", due, err)
		}
	})

	t.Run("ReliableParkTakesItemAndParksInOneStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, processing := b.r.Client, b.r.Key("processing")
		rdb.RPush(b.ctx, processing, "other", "item", "item")
		_, parked, err := script.ParkValue(b.ctx, rdb, b.set, processing, "item", "t1\ncopy", time.Second, 0, 0)
		if err != nil || !parked {
			t.Fatalf("park = %v %v, want parked", parked, err)
		}
		items, _ := rdb.LRange(b.ctx, processing, 0, -1).Result()
		if strings.Join(items, ",") != "other,item" {
			t.Fatalf("processing list = %v, want one item taken", items)
		}
		if n, _ := rdb.ZCard(b.ctx, b.set).Result(); n != 1 {
			t.Fatalf("set holds %d, want 1", n)
		}
	})

	t.Run("ReliableParkOfGoneItemWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, processing := b.r.Client, b.r.Key("processing")
		rdb.RPush(b.ctx, processing, "other")
		_, parked, err := script.ParkValue(b.ctx, rdb, b.set, processing, "item", "t1\ncopy", time.Second, time.Hour, 0)
		if err != nil || parked {
			t.Fatalf("park = %v %v, want not parked", parked, err)
		}
		if n, _ := rdb.Exists(b.ctx, b.set).Result(); n != 0 {
			t.Fatal("a copy of an item recovered by another consumer was parked")
		}
	})

	t.Run("WrongTypeKeysWriteNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, processing := b.r.Client, b.r.Key("processing")
		rdb.RPush(b.ctx, processing, "item")
		rdb.Set(b.ctx, b.set, "x", 0)
		if _, _, err := script.ParkValue(b.ctx, rdb, b.set, processing, "item", "t\nc", time.Second, 0, 0); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("park into a string key = %v, want WRONGTYPE", err)
		}
		if n, _ := rdb.LLen(b.ctx, processing).Result(); n != 1 {
			t.Fatal("the item left the processing list although nothing was parked")
		}
		other := b.r.Key("other")
		rdb.Set(b.ctx, other, "x", 0)
		if _, _, err := script.ParkValue(b.ctx, rdb, b.r.Key("set2"), other, "item", "t\nc", time.Second, 0, 0); err == nil {
			t.Fatal("park with a processing list of the wrong type succeeded")
		}
		if n, _ := rdb.Exists(b.ctx, b.r.Key("set2")).Result(); n != 0 {
			t.Fatal("a member was parked although the processing list could not be read")
		}
	})
}

func TestSweepList(t *testing.T) {
	t.Parallel()

	t.Run("PushesOnlyDueValuesToTheTailInDueOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, list := b.r.Client, b.r.Key("list")
		rdb.RPush(b.ctx, list, "waiting")
		v1, v2 := wire.Envelope([]byte{0x00, '\n', 0xff}, map[string]string{"h": "1"}), wire.Envelope([]byte("b"), nil)
		rdb.ZAdd(b.ctx, b.set,
			redis.Z{Score: 150, Member: wire.ValueDelayMember("b", v2)},
			redis.Z{Score: 100, Member: wire.ValueDelayMember("a", v1)},
			redis.Z{Score: 300, Member: wire.ValueDelayMember("c", []byte("later"))})
		res, err := script.SweepList(b.ctx, rdb, b.set, list, 200, script.SweepBatch)
		if err != nil || res != (script.SweepResult{Moved: 2, Next: 300, Now: 200}) {
			t.Fatalf("sweep = %+v, %v; want moved 2, next 300, now 200", res, err)
		}
		items, _ := rdb.LRange(b.ctx, list, 0, -1).Result()
		if len(items) != 3 || items[0] != "waiting" || items[1] != string(v1) || items[2] != string(v2) {
			t.Fatalf("list = %q, want the waiting item then both envelopes byte for byte", items)
		}
	})

	t.Run("PushesMemberWithoutTokenWhole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, list := b.r.Client, b.r.Key("list")
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 1, Member: "no token"})
		if res, err := script.SweepList(b.ctx, rdb, b.set, list, 10, script.SweepBatch); err != nil || res.Moved != 1 || res.Next != -1 {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
		if v, _ := rdb.LPop(b.ctx, list).Result(); v != "no token" {
			t.Fatalf("list head = %q, want the member kept whole", v)
		}
	})

	t.Run("WrongTypeListMovesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, list := b.r.Client, b.r.Key("list")
		rdb.Set(b.ctx, list, "x", 0)
		rdb.ZAdd(b.ctx, b.set, redis.Z{Score: 1, Member: "t\nv"})
		if _, err := script.SweepList(b.ctx, rdb, b.set, list, 10, script.SweepBatch); err == nil {
			t.Fatal("sweep into a string key succeeded")
		}
		if n, _ := rdb.ZCard(b.ctx, b.set).Result(); n != 1 {
			t.Fatal("a member left the set although it was not pushed")
		}
	})

	t.Run("MovesEachMemberOnceWithConcurrentSweepers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, list := b.r.Client, b.r.Key("list")
		const n = 300
		for i := range n {
			rdb.ZAdd(b.ctx, b.set, redis.Z{Score: float64(i), Member: wire.ValueDelayMember(fmt.Sprint(i), []byte(fmt.Sprint(i)))})
		}
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for {
					res, err := script.SweepList(b.ctx, rdb, b.set, list, n, 7)
					if err != nil {
						t.Errorf("sweep: %v", err)
						return
					}
					if res.Moved == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		items, _ := rdb.LRange(b.ctx, list, 0, -1).Result()
		seen := map[string]bool{}
		for _, v := range items {
			seen[v] = true
		}
		if len(items) != n || len(seen) != n {
			t.Fatalf("list has %d items, %d distinct; want %d each", len(items), len(seen), n)
		}
	})
}

func TestSweepChannel(t *testing.T) {
	t.Parallel()

	t.Run("PublishesDueValuesAndCountsUnheard", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb, channel := b.r.Client, b.r.Key("ch")
		sub := rdb.Subscribe(b.ctx, channel)
		defer sub.Close()
		if _, err := sub.Receive(b.ctx); err != nil {
			t.Fatal(err)
		}
		v := wire.Envelope([]byte{0x00, 0xff}, map[string]string{"settle-retry-count": "1"})
		rdb.ZAdd(b.ctx, b.set,
			redis.Z{Score: 100, Member: wire.ValueDelayMember("a", v)},
			redis.Z{Score: 900, Member: wire.ValueDelayMember("b", []byte("later"))})
		res, err := script.SweepChannel(b.ctx, rdb, b.set, channel, 200, script.SweepBatch)
		if err != nil || res != (script.SweepResult{Moved: 1, Next: 900, Now: 200}) {
			t.Fatalf("sweep = %+v, %v; want moved 1 heard, next 900", res, err)
		}
		m, err := sub.ReceiveMessage(b.ctx)
		if err != nil || m.Payload != string(v) {
			t.Fatalf("received %v, %v; want the envelope byte for byte", m, err)
		}
		res, err = script.SweepChannel(b.ctx, rdb, b.set, b.r.Key("nobody"), 1000, script.SweepBatch)
		if err != nil || res.Moved != 1 || res.Unheard != 1 || res.Next != -1 {
			t.Fatalf("sweep to a channel nobody reads = %+v, %v; want moved 1, unheard 1", res, err)
		}
	})
}
