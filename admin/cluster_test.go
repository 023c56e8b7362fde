package admin_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/wire"
)

// The TestCluster tests run on a Redis Cluster (SETTLE_REDIS_CLUSTER; .ci/run starts
// one), where the Inspector checks slots on its own.

func TestClusterReplayStaysInOneSlotAndRefusesAnotherSlot(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()
	in, dlq, other := c.Key("in"), c.Key("dlq"), c.Other("in")
	for _, k := range []string{in, other} {
		if err := c.Client.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []any{"payload", "first"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Client.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: []any{"payload", "p", settle.HeaderDeadSource, in, settle.HeaderRetryCount, "3"}}).Err(); err != nil {
		t.Fatal(err)
	}
	insp := admin.NewInspector(c.Client)
	if _, err := insp.Replay(ctx, dlq, admin.Filter{}, admin.To(other)); !errors.Is(err, admin.ErrCrossSlot) {
		t.Fatalf("Replay across slots = %v, want ErrCrossSlot", err)
	}
	res, err := insp.Replay(ctx, dlq, admin.Filter{})
	if err != nil || len(res.Replayed) != 1 {
		t.Fatalf("Replay in one slot = %+v, %v", res, err)
	}
}

func TestClusterReplayListStaysInOneSlotAndRefusesAnotherSlot(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()
	in, dlq, other := c.Key("in"), c.Key("dlq"), c.Other("in")
	dead := wire.Envelope([]byte("p"), map[string]string{settle.HeaderDeadSource: in, settle.HeaderRetryCount: "3"})
	if err := c.Client.RPush(ctx, dlq, dead).Err(); err != nil {
		t.Fatal(err)
	}
	insp := admin.NewInspector(c.Client)
	if _, err := insp.ReplayList(ctx, dlq, admin.Filter{}, admin.To(other)); !errors.Is(err, admin.ErrCrossSlot) || !contains(err, other) {
		t.Fatalf("ReplayList across slots = %v, want ErrCrossSlot naming %s", err, other)
	}
	if n, _ := c.Client.LLen(ctx, dlq).Result(); n != 1 {
		t.Fatalf("dead-letter list holds %d after the refusal, want 1", n)
	}
	res, err := insp.ReplayList(ctx, dlq, admin.Filter{})
	if err != nil || len(res.Replayed) != 1 {
		t.Fatalf("ReplayList in one slot = %+v, %v", res, err)
	}
	if n, _ := c.Client.LLen(ctx, in).Result(); n != 1 {
		t.Fatalf("source list holds %d after the replay, want 1", n)
	}
	if _, err := insp.PurgeList(ctx, dlq, admin.Filter{}); err != nil {
		t.Fatalf("PurgeList of an emptied dead-letter list = %v", err)
	}
}
