package script_test

import (
	"context"
	"testing"
	"time"

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
