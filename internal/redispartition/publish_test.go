package redispartition_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
)

func TestKeyedPublishGoesToThePartitionOfItsKeyWithItsKeyHeader(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	src := settle.PartitionedStream(b.r.Client, b.name, b.group, settle.Partitions(16))
	if err := src.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(b.r.Client)
	if _, err := pub.PublishBytes(ctx, b.name, []byte("x"), settle.Key("customer-1")); err != nil {
		t.Fatal(err)
	}
	if got := settle.PartitionFor("customer-1", 16); got != 7 {
		t.Fatalf("PartitionFor(customer-1, 16) = %d, want 7 (FNV-1a 0x124fb217 mod 16)", got)
	}
	msgs, err := b.r.Client.XRange(ctx, keys.Partition(b.name, 7), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("partition 7 holds %d entries (%v), want the one published", len(msgs), err)
	}
	if k := msgs[0].Values[settle.HeaderKey]; k != "customer-1" {
		t.Fatalf("entry's %s = %v, want customer-1", settle.HeaderKey, k)
	}
}

func TestPublishWithoutKeyToAPartitionedStreamIsRefused(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	if err := settle.PartitionedStream(b.r.Client, b.name, b.group, settle.Partitions(4)).Declare(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := settle.NewPublisher(b.r.Client).PublishBytes(ctx, b.name, []byte("x"))
	if !errors.Is(err, settle.ErrNoKey) || !strings.Contains(err.Error(), "4 partitions") {
		t.Fatalf("publish without Key = %v, want ErrNoKey naming the 4 partitions", err)
	}
}

func TestKeyedPublishToANameNothingMadeYetIsRefused(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	_, err := settle.NewPublisher(b.r.Client).PublishBytes(context.Background(), b.name, []byte("x"), settle.Key("k"))
	if !errors.Is(err, settle.ErrNoStream) {
		t.Fatalf("keyed publish to nothing = %v, want ErrNoStream", err)
	}
	if n, _ := b.r.Client.Exists(context.Background(), b.name).Result(); n != 0 {
		t.Fatalf("the refused publish made %s", b.name)
	}
}

// A mount declaring another number of partitions is refused while the recorded layout
// holds an unsettled entry, and records the new one once it is drained.
func TestChangingPartitionsIsRefusedWhileTheOldLayoutHoldsEntries(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	s := &sourcetest.Subject{Source: b.source(t)} // 4 partitions, group made by no one yet
	pub := settle.NewPublisher(b.r.Client)
	if _, err := pub.PublishBytes(ctx, b.name, []byte("x"), settle.Key("customer-1")); err != nil {
		t.Fatal(err)
	}

	eight := &sourcetest.Subject{Source: settle.PartitionedStream(b.r.Client, b.name, b.group, settle.Partitions(8), settle.Block(50*time.Millisecond))}
	run := sourcetest.Start(t, eight, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	err := run.Wait(t)
	if err == nil || !strings.Contains(err.Error(), "has 4 partitions, not the 8 declared") || !strings.Contains(err.Error(), "entries and no group") {
		t.Fatalf("Run with Partitions(8) over a 4-partition stream holding an entry = %v, want a refusal naming it", err)
	}

	// Drain it with the 4-partition mount, then 8 is recorded.
	run = sourcetest.Start(t, s, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	run.WaitFor(t, "the entry acked", time.Millisecond, func(evs []settle.Settled) bool { return len(evs) == 1 })
	run.Stop(t)
	sink := logtest.New("re-partitioned")
	eight.Config.Logger = sink.Logger()
	run = sourcetest.Start(t, eight, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	defer run.Stop(t)
	select {
	case <-sink.Seen("re-partitioned"):
	case <-time.After(sourcetest.WaitTimeout):
		t.Fatal("the drained stream was not re-partitioned")
	}
	if n, _ := b.r.Client.HGet(ctx, b.name, "partitions").Result(); n != "8" {
		t.Fatalf("partitions recorded %q once drained, want 8", n)
	}
	// A new publisher reads the new layout (one that read the old must be restarted).
	if _, err := settle.NewPublisher(b.r.Client).PublishBytes(ctx, b.name, []byte("y"), settle.Key("customer-1")); err != nil {
		t.Fatal(err)
	}
	run.WaitFor(t, "the new entry acked", time.Millisecond, func(evs []settle.Settled) bool { return len(evs) == 1 })
}
