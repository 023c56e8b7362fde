package settle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestClusterPartitionedStreamSpreadsOverMastersAndSettlesPerPartition runs a
// partitioned stream of 16 partitions on a Redis Cluster with two mounts: each
// partition's stream, delay set and dead letters share its slot (one script each), the
// partitions land on more than one master, every message is handled until acked once
// (after a durable delay in its own partition), and a poison one is dead-lettered to its
// partition's dead-letter stream.
func TestClusterPartitionedStreamSpreadsOverMastersAndSettlesPerPartition(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	ctx := context.Background()
	const parts, n = 16, 160
	name := "t" + strings.Trim(c.Prefix, "{}:") + "-orders"
	t.Cleanup(func() {
		del := []string{name, keys.PartitionMembers(name, "workers")}
		for i := range parts {
			del = append(del, keys.Partition(name, i), keys.InPartition(name, i, "dead"), keys.InPartition(name, i, "delayed"), keys.PartitionLease(name, i, "workers"))
		}
		for _, k := range del {
			c.Client.Del(ctx, k)
		}
	})
	masters := map[string]bool{}
	for i := range parts {
		m, err := c.Client.MasterForKey(ctx, keys.Partition(name, i))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("16 partitions on %d master(s), want them spread", len(masters))
	}

	var mu sync.Mutex
	acked := map[string]int{}
	allAcked, deadLettered := make(chan struct{}), make(chan struct{})
	var deadOnce sync.Once
	onSettled := func(_ context.Context, ev settle.Settled) {
		if ev.Action == settle.ActionDeadLetter && ev.Err == nil {
			deadOnce.Do(func() { close(deadLettered) })
		}
	}
	handler := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		switch {
		case string(m.Payload) == "poison":
			return errors.New("poison")
		case m.Attempt == 1:
			return settle.RetryAfter(10*time.Millisecond, errors.New("later"))
		}
		mu.Lock()
		if acked[string(m.Payload)]++; len(acked) == n && acked[string(m.Payload)] == 1 {
			close(allAcked)
		}
		mu.Unlock()
		return nil
	})
	opts := []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "delayed"}), settle.MaxAttempts(2), settle.DeadLetter("dead")}
	src := func(member string) *settle.PartitionedStreamSource {
		return settle.PartitionedStream(c.Client, name, "workers", settle.Partitions(parts), settle.Consumer(member), settle.Block(50*time.Millisecond), settle.LeaseTTL(time.Second))
	}
	if err := src("a").Declare(ctx); err != nil {
		t.Fatal(err)
	}
	subject := func(member string) *sourcetest.Subject {
		s := &sourcetest.Subject{Source: src(member)}
		s.Config.OnSettled = onSettled
		return s
	}
	runA := sourcetest.Start(t, subject("a"), handler, opts...)
	runB := sourcetest.Start(t, subject("b"), handler, opts...)
	pub := settle.NewPublisher(c.Client)
	for i := range n {
		if _, err := pub.PublishBytes(ctx, name, []byte(fmt.Sprint(i)), settle.Key(fmt.Sprintf("customer-%d", i%32))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pub.PublishBytes(ctx, name, []byte("poison"), settle.Key("customer-1")); err != nil {
		t.Fatal(err)
	}
	dead := keys.InPartition(name, settle.PartitionFor("customer-1", parts), "dead")
	for what, ch := range map[string]chan struct{}{"every message acked": allAcked, "the poison dead-lettered": deadLettered} {
		select {
		case <-ch:
		case <-time.After(sourcetest.WaitTimeout):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	runA.Stop(t)
	runB.Stop(t)
	if got := c.Client.XLen(ctx, dead).Val(); got != 1 {
		t.Fatalf("%s holds %d dead letters, want the poison one", dead, got)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, v := range acked {
		if v != 1 {
			t.Fatalf("message %s acked %d times, want once", k, v)
		}
	}
}

// TestClusterOrderedPartitionedStream runs the Ordered scenarios on a partitioned
// stream of 4 partitions spread over a Redis Cluster's masters, on a fake clock.
func TestClusterOrderedPartitionedStream(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	var made atomic.Int32
	sourcetest.RunOrdered(t, func(t *testing.T) *sourcetest.OrderedSubject {
		const parts = 4
		ctx := context.Background()
		name := fmt.Sprintf("t%s-ordered%d", strings.Trim(c.Prefix, "{}:"), made.Add(1)) // a stream of its own per scenario
		t.Cleanup(func() {
			del := []string{name, keys.PartitionMembers(name, "workers")}
			for i := range parts {
				del = append(del, keys.Partition(name, i), keys.InPartition(name, i, "dead"), keys.PartitionLease(name, i, "workers"))
			}
			for _, k := range del {
				c.Client.Del(ctx, k)
			}
		})
		src := func(member string) *settle.PartitionedStreamSource {
			return settle.PartitionedStream(c.Client, name, "workers", settle.Partitions(parts), settle.Consumer(member), settle.Block(50*time.Millisecond))
		}
		if err := src("m1").Declare(ctx); err != nil {
			t.Fatal(err)
		}
		pub := settle.NewPublisher(c.Client)
		return &sourcetest.OrderedSubject{
			Clock:      sourcetest.NewClock(),
			DeadLetter: "dead",
			Publish: func(t testing.TB, key, payload string) {
				t.Helper()
				if _, err := pub.PublishBytes(ctx, name, []byte(payload), settle.Key(key)); err != nil {
					t.Fatalf("publish: %v", err)
				}
			},
			Crash: func(t testing.TB, n int) {
				t.Helper()
				key := keys.Partition(name, settle.PartitionFor("a", parts))
				if err := c.Client.XGroupCreateMkStream(ctx, key, "workers", "0").Err(); err != nil {
					t.Fatalf("xgroup create: %v", err)
				}
				sourcetest.CrashRead(t, c.Client, key, "workers", "crashed", n)
			},
			Source: src("m2"),
			Before: src("m1"),
		}
	})
}
