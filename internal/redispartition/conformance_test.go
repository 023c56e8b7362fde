package redispartition_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

const parts = 4

// TestPartitionedStreamConformance runs the conformance suite on a PartitionedStream of
// 4 partitions, the messages of each scenario published with one key (the suite
// expects them in publish order; its scenarios land in different partitions), on miniredis or, with SETTLE_REDIS_URL set, on a real
// server; once on the wall clock and once on a fake clock.
func TestPartitionedStreamConformance(t *testing.T) {
	// Dedupe is refused on a partitioned stream (not yet: its marks would live per
	// partition), as are the flow limits.
	features := sourcetest.Features{NoDedupe: true}
	t.Parallel()
	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, features, func(t *testing.T) *sourcetest.Subject {
			return newSubject(t, nil)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, features, func(t *testing.T) *sourcetest.Subject {
			return newSubject(t, sourcetest.NewClock())
		})
	})
}

// bundle is one test's partitioned stream.
type bundle struct {
	r     *redistest.Redis
	name  string
	group string
}

// newBundle returns a fresh partitioned stream name on t's Redis (no braces: each
// partition's tag is made from it), whose keys are deleted when the test ends.
func newBundle(t testing.TB) *bundle {
	r := redistest.New(t)
	name := r.Untagged(t, "orders")
	return &bundle{r: r, name: name, group: "workers"}
}

// source returns the bundle's PartitionedStream, its layout declared so that a
// publisher may write before the mount has started.
func (b *bundle) source(t testing.TB, opts ...settle.PartitionedStreamOption) *settle.PartitionedStreamSource {
	t.Helper()
	src := settle.PartitionedStream(b.r.Client, b.name, b.group, append([]settle.PartitionedStreamOption{settle.Partitions(parts), settle.Block(50 * time.Millisecond)}, opts...)...)
	if err := src.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return src
}

// readAll reads the stream key of every partition (key "" for the partitions
// themselves), oldest entry first across them.
func (b *bundle) readAll(t testing.TB, key string) []sourcetest.Dead {
	t.Helper()
	type entry struct {
		id string
		d  sourcetest.Dead
	}
	var all []entry
	for i := range parts {
		k := keys.Partition(b.name, i)
		if key != "" {
			k = keys.InPartition(b.name, i, key)
		}
		msgs, err := b.r.Client.XRange(context.Background(), k, "-", "+").Result()
		if err != nil {
			t.Fatalf("xrange %s: %v", k, err)
		}
		ds := sourcetest.ReadStreamDead(t, b.r.Client, k)
		for j, m := range msgs {
			all = append(all, entry{m.ID, ds[j]})
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int {
		var am, as, bm, bs uint64
		fmt.Sscanf(a.id, "%d-%d", &am, &as)
		fmt.Sscanf(b.id, "%d-%d", &bm, &bs)
		switch {
		case am != bm:
			return cmpU(am, bm)
		default:
			return cmpU(as, bs)
		}
	})
	out := make([]sourcetest.Dead, len(all))
	for i, e := range all {
		out[i] = e.d
	}
	return out
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pending sums the group's pending entries over the partitions.
func (b *bundle) pending(t testing.TB) int64 {
	t.Helper()
	var n int64
	for i := range parts {
		p, err := b.r.Client.XPending(context.Background(), keys.Partition(b.name, i), b.group).Result()
		if err != nil && !strings.HasPrefix(err.Error(), "NOGROUP") {
			t.Fatalf("xpending: %v", err)
		}
		if p != nil {
			n += p.Count
		}
	}
	return n
}

func newSubject(t *testing.T, c *sourcetest.Clock) *sourcetest.Subject {
	b := newBundle(t)
	pub := settle.NewPublisher(b.r.Client)
	key := "k" + b.name // one key per scenario: its messages keep their order, in one partition
	s := &sourcetest.Subject{
		DeadLetter:  "dead",
		DeadLetters: func(t testing.TB) []sourcetest.Dead { t.Helper(); return b.readAll(t, "dead") },
		ReplyTo:     "replies",
		Replies:     func(t testing.TB) []sourcetest.Dead { t.Helper(); return b.readAll(t, "replies") },
		Pending:     b.pending,
		Publish: func(t testing.TB, payload []byte, headers map[string]string) {
			t.Helper()
			if _, err := pub.PublishBytes(context.Background(), b.name, payload, settle.Headers(headers), settle.Key(key)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		},
		Source: b.source(t),
	}
	sourcetest.PauseByKey(s, b.r.Client, b.name, b.group)
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}

var _ redis.UniversalClient = (*redis.Client)(nil)
