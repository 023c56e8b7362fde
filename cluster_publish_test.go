package settle_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// TestClusterDelayedPublishParksInTheStreamsSlotAndRefusesAnother: on a Redis Cluster
// the delayed publish's script runs on the master of the stream's slot, and a delay set
// in another slot is refused before anything is written.
func TestClusterDelayedPublishParksInTheStreamsSlotAndRefusesAnother(t *testing.T) {
	t.Parallel()
	r := redistest.Cluster(t)
	ctx := context.Background()
	pub := settle.NewPublisher(r.Client)
	in, dz := r.Key("in"), delayed.DurableZset{Key: r.Key("delayed"), TTL: time.Hour}
	if _, err := pub.Publish(ctx, in, 1, settle.After(time.Minute), settle.DelaySet(dz)); err != nil {
		t.Fatal(err)
	}
	if n := r.Client.ZCard(ctx, dz.Key).Val(); n != 1 {
		t.Fatalf("delay set holds %d members, want 1", n)
	}
	other := delayed.DurableZset{Key: r.Other("delayed")}
	if _, err := pub.Publish(ctx, in, 1, settle.After(time.Minute), settle.DelaySet(other)); err == nil || !strings.Contains(err.Error(), "slot") {
		t.Fatalf("Publish with a delay set in another slot = %v, want a slot refusal", err)
	}
}

// TestClusterTrimRunsOnTheStreamsMaster: the trim script (XINFO GROUPS, XPENDING,
// XTRIM on one key) runs on a Redis Cluster and trims only what the group acknowledged.
func TestClusterTrimRunsOnTheStreamsMaster(t *testing.T) {
	t.Parallel()
	r := redistest.Cluster(t)
	ctx := context.Background()
	in := r.Key("in")
	var ids []string
	for range 3 {
		ids = append(ids, r.Client.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: []any{"payload", "x"}}).Val())
	}
	if err := r.Client.XGroupCreate(ctx, in, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{in, ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	r.Client.XAck(ctx, in, "g", ids[0])
	// "Now" is a millisecond past the last entry: on the server's TIME, a run that added
	// the entries and trimmed within one millisecond kept them all as young.
	ms, _, _ := strings.Cut(ids[2], "-")
	now, _ := strconv.ParseInt(ms, 10, 64)
	res, err := script.Trim(ctx, r.Client, in, 0, now+1)
	if err != nil || res.Trimmed != 1 || res.Bound != ids[1] {
		t.Fatalf("trim = %+v, %v; want the acknowledged first entry trimmed below the pending %s", res, err, ids[1])
	}
}
