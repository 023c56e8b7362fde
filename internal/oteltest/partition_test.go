package oteltest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/settlekit/settle"
	skeys "github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/settletest"
)

// A PartitionedStream mount's settlements are counted per partition: each series is
// labelled by the mount and messaging.destination.partition.id, the partition's index
// (its key, "{name:i}", is messaging.destination.name), so one partition's backlog or
// failures show apart; a plain stream's series carry no partition id.
func TestPartitionedStreamSeriesAreLabelledByMountAndPartitionIndex(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	// A name of the test's own without a {hash tag} (each partition's tag is made from it),
	// its keys deleted at the end.
	name := fmt.Sprintf("otel-%d-orders", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		ks, _ := h.Redis.Client.Keys(ctx, "{"+name+"*").Result()
		_ = h.Redis.Client.Del(ctx, append(ks, name)...).Err()
	})
	src := settle.PartitionedStream(h.Redis.Client, name, "g", settle.Partitions(2), settle.Consumer("m1"))
	if err := src.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	plain := h.Redis.Key("plain")
	ok := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })
	h.Mount(src, ok, settle.Name("orders"))
	h.Mount(settle.Stream(h.Redis.Client, plain, "g"), ok, settle.Name("plain"))
	h.Start()
	want := map[int]int64{}
	for k := range 10 {
		key := fmt.Sprintf("customer-%d", k)
		want[skeys.PartitionFor(key, 2)]++
		h.Publish(name, k, settle.Key(key))
	}
	h.Publish(plain, "x")
	h.WaitSettled(11)
	h.Stop()

	ms := tm.collect(t)
	for i := range 2 {
		labels := map[string]string{"settle.mount": "orders", "messaging.destination.partition.id": fmt.Sprint(i), "messaging.destination.name": skeys.Partition(name, i)}
		if got := sumOf(t, ms, "settle.settlements", labels); got != want[i] {
			t.Errorf("settle.settlements%v = %d, want %d (the messages routed to partition %d)", labels, got, want[i], i)
		}
	}
	if got := sumOf(t, ms, "settle.settlements", map[string]string{"settle.mount": "plain"}); got != 1 {
		t.Fatalf("settle.settlements{mount=plain} = %d, want 1", got)
	}
	for _, p := range ms["settle.settlements"].Data.(metricdata.Sum[int64]).DataPoints {
		if _, has := p.Attributes.Value("messaging.destination.partition.id"); has && matches(p.Attributes, map[string]string{"settle.mount": "plain"}) {
			t.Fatalf("a plain stream's series %v carries a partition id", p.Attributes.ToSlice())
		}
	}
}
