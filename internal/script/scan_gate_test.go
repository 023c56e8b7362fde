package script_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

func TestStartScanLetsOneConsumerStartAPassPerPeriod(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("claim-scan:g")
	const period = 10 * time.Minute

	for _, c := range []struct {
		consumer string
		want     bool
	}{{"c1", true}, {"c2", false}, {"c1", false}} {
		ok, err := script.StartScan(ctx, r.Client, key, c.consumer, period)
		if err != nil || ok != c.want {
			t.Fatalf("StartScan(%s) = %v, %v; want %v (c1 started a pass just now)", c.consumer, ok, err, c.want)
		}
	}
	if by, err := r.Client.HGet(ctx, key, "by").Result(); err != nil || by != "c1" {
		t.Fatalf("scan key names %q, %v; want c1", by, err)
	}

	// A pass started a period ago: the next consumer to ask starts one. (The start is
	// kept in the value, so this holds on miniredis too, whose keys never expire by
	// themselves.)
	past := time.Now().Add(-period - time.Second).UnixMilli()
	if err := r.Client.HSet(ctx, key, "at", past).Err(); err != nil {
		t.Fatal(err)
	}
	ok, err := script.StartScan(ctx, r.Client, key, "c2", period)
	if err != nil || !ok {
		t.Fatalf("StartScan(c2) a period after c1's pass = %v, %v; want true", ok, err)
	}
	if ttl, err := r.Client.PTTL(ctx, key).Result(); err != nil || ttl <= period || ttl > 2*period {
		t.Fatalf("scan key expires in %s, %v; want within two periods, after one", ttl, err)
	}
}

// A consumer is pruned only when it holds no pending entry and has been idle long
// enough; the asking consumer and one holding an entry are kept.
func TestPruneConsumersRemovesOnlyIdleConsumersHoldingNothing(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	stream := r.Key("in")
	if err := r.Client.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// "gone" was delivered an entry and acked it; "busy" holds one; "self" asks.
	for _, c := range []string{"gone", "busy", "self"} {
		id, err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", c}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Read, then claimed by c: miniredis counts a consumer's idle time from its claims
		// only (XINFO CONSUMERS says -1 for one that only read).
		if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "reader", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Client.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: "g", Consumer: c, Messages: []string{id}}).Err(); err != nil {
			t.Fatal(err)
		}
		if c != "busy" {
			if err := r.Client.XAck(ctx, stream, "g", id).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Wait (bounded) until the server counts "gone" idle for the 1 ms asked.
	for deadline := time.Now().Add(10 * time.Second); ; {
		cs, err := r.Client.XInfoConsumers(ctx, stream, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		idle := true
		for _, c := range cs {
			idle = idle && (c.Name == "reader" || c.Idle >= 2*time.Millisecond)
		}
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers never idle: %+v", cs)
		}
		if r.Mini != nil {
			r.Mini.SetTime(time.Now().Add(time.Second))
		}
	}
	removed, err := script.PruneConsumers(ctx, r.Client, stream, "g", "self", time.Millisecond)
	if err != nil || !slices.Contains(removed, "gone") || slices.Contains(removed, "busy") || slices.Contains(removed, "self") {
		t.Fatalf("pruned %v, %v; want gone (and reader, on a real server), never busy or self", removed, err)
	}
	cs, err := r.Client.XInfoConsumers(ctx, stream, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	if slices.Contains(names, "gone") || !slices.Contains(names, "busy") || !slices.Contains(names, "self") {
		t.Fatalf("consumers left %v, want busy (one pending) and self", names)
	}
}
