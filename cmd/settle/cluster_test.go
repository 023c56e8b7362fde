package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/wire"
)

// The TestCluster tests run the binary on a Redis Cluster (SETTLE_REDIS_CLUSTER;
// .ci/run starts one), given as --redis with the nodes comma-separated.

// onCluster runs the binary with args against the cluster's nodes.
func onCluster(t *testing.T, args ...string) result {
	t.Helper()
	return runSettle(t, nil, nil, append([]string{"--redis", os.Getenv(redistest.EnvCluster)}, args...)...)
}

func TestClusterDlqReplayToAnotherSlotFailsWithExit1AndChangesNothing(t *testing.T) {
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
	r := onCluster(t, "dlq", "replay", dlq, "--to", other, "--yes")
	if r.code != exitError || !strings.Contains(r.stderr, "another cluster slot") || !strings.Contains(r.stderr, other) {
		t.Fatalf("dlq replay to another slot: exit %d, stderr %q; want 1 and the cross-slot refusal naming %s", r.code, r.stderr, other)
	}
	if n, _ := c.Client.XLen(ctx, dlq).Result(); n != 1 {
		t.Fatalf("dead-letter stream holds %d after the refusal, want 1", n)
	}
	if r := onCluster(t, "dlq", "replay", dlq, "--yes"); r.code != exitOK {
		t.Fatalf("dlq replay in one slot: exit %d, stderr %q", r.code, r.stderr)
	}
	if n, _ := c.Client.XLen(ctx, in).Result(); n != 2 {
		t.Fatalf("the source stream holds %d after the replay, want 2", n)
	}
}

func TestClusterListDlqReplayToAnotherSlotFailsWithExit1AndChangesNothing(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()
	in, dlq, other := c.Key("in"), c.Key("dlq"), c.Other("in")
	dead := wire.Envelope([]byte("p"), map[string]string{settle.HeaderDeadSource: in, settle.HeaderDeadReason: "max attempts", settle.HeaderRetryCount: "3"})
	if err := c.Client.RPush(ctx, dlq, dead).Err(); err != nil {
		t.Fatal(err)
	}
	r := onCluster(t, "list", "dlq", "replay", dlq, "--to", other, "--yes")
	if r.code != exitError || !strings.Contains(r.stderr, "another cluster slot") || !strings.Contains(r.stderr, other) {
		t.Fatalf("list dlq replay to another slot: exit %d, stderr %q; want 1 and the cross-slot refusal naming %s", r.code, r.stderr, other)
	}
	if n, _ := c.Client.LLen(ctx, dlq).Result(); n != 1 {
		t.Fatalf("dead-letter list holds %d after the refusal, want 1", n)
	}
	if r := onCluster(t, "--json", "stats", dlq); r.code != exitOK || !strings.Contains(r.stdout, `"kind":"dead-letters"`) {
		t.Fatalf("stats on the cluster: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := onCluster(t, "list", "dlq", "replay", dlq, "--yes"); r.code != exitOK {
		t.Fatalf("list dlq replay in one slot: exit %d, stderr %q", r.code, r.stderr)
	}
	if n, _ := c.Client.LLen(ctx, in).Result(); n != 1 {
		t.Fatalf("the source list holds %d after the replay, want 1", n)
	}
}
