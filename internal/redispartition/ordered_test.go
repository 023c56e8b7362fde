package redispartition_test

import (
	"context"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestOrderedPartitionedStream runs the Ordered scenarios on a PartitionedStream of 4
// partitions, on miniredis or, with SETTLE_REDIS_URL set, on a real server, on a fake
// clock; its crash is a member that read a partition's entries and died, whose
// partition another member takes over.
func TestOrderedPartitionedStream(t *testing.T) {
	t.Parallel()
	sourcetest.RunOrdered(t, func(t *testing.T) *sourcetest.OrderedSubject {
		b := newBundle(t)
		pub := settle.NewPublisher(b.r.Client)
		return &sourcetest.OrderedSubject{
			Clock:      sourcetest.NewClock(),
			DeadLetter: "dead",
			Publish: func(t testing.TB, key, payload string) {
				t.Helper()
				if _, err := pub.PublishBytes(context.Background(), b.name, []byte(payload), settle.Key(key)); err != nil {
					t.Fatalf("publish: %v", err)
				}
			},
			Crash: func(t testing.TB, n int) {
				t.Helper()
				key := keys.Partition(b.name, settle.PartitionFor("a", parts))
				if err := b.r.Client.XGroupCreateMkStream(context.Background(), key, b.group, "0").Err(); err != nil {
					t.Fatalf("xgroup create: %v", err)
				}
				sourcetest.CrashRead(t, b.r.Client, key, b.group, "crashed", n)
			},
			Source: b.source(t, settle.Consumer("m2")),
			Before: b.source(t, settle.Consumer("m1")),
		}
	})
}
