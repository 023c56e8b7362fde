package settle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// The tests in this file run on a Redis Cluster (SETTLE_REDIS_CLUSTER: its masters'
// addresses; .ci/run starts a 3-master cluster on free loopback ports) and skip
// without one. Every key carries the test's own {hash tag}, so each subject's keys
// share one slot, as DESIGN.md asks of users.

// TestClusterStreamConformance runs the conformance suite on Stream over a
// *redis.ClusterClient, on the wall clock and on a fake clock.
func TestClusterStreamConformance(t *testing.T) {
	t.Parallel()
	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{TakesLimits: true}, func(t *testing.T) *sourcetest.Subject {
			return newClusterStreamSubject(t, nil, func(rdb redis.UniversalClient, in, group string) settle.Source {
				return settle.Stream(rdb, in, group, settle.Block(50*time.Millisecond))
			})
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{TakesLimits: true}, func(t *testing.T) *sourcetest.Subject {
			return newClusterStreamSubject(t, sourcetest.NewClock(), func(rdb redis.UniversalClient, in, group string) settle.Source {
				return settle.Stream(rdb, in, group, settle.Block(50*time.Millisecond))
			})
		})
	})
}

// TestClusterClaimingStreamConformance runs the conformance suite on ClaimingStream
// (XAUTOCLAIM in a Lua script) over a *redis.ClusterClient, on the wall clock.
func TestClusterClaimingStreamConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourcetest.Features{TakesLimits: true, UsesDeliveryCounter: true}, func(t *testing.T) *sourcetest.Subject {
		return newClusterStreamSubject(t, nil, func(rdb redis.UniversalClient, in, group string) settle.Source {
			return settle.ClaimingStream(rdb, in, group, 100*time.Millisecond, settle.Block(50*time.Millisecond))
		})
	})
}

// TestClusterListConformance runs the conformance suite on List and ReliableList (whose
// processing list, heartbeat and consumer set are derived into the list's slot) over a
// *redis.ClusterClient, on the wall clock.
func TestClusterListConformance(t *testing.T) {
	t.Parallel()
	t.Run("List", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{LosesRetryWithoutCap: true, NoDedupe: true, RunsQueuedAtStop: true}, func(t *testing.T) *sourcetest.Subject {
			return newClusterListSubject(t, false)
		})
	})
	t.Run("ReliableList", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{PutsBackWithoutCap: true, TakesLimits: true}, func(t *testing.T) *sourcetest.Subject {
			return newClusterListSubject(t, true)
		})
	})
}

// TestClusterDurableZsetDelayRoundTrip proves a durable delay works on a cluster: the
// park script (delay set + stream) and the sweep script run on the slot's master, the
// copy comes back as attempt 2, and nothing is left pending or parked.
func TestClusterDurableZsetDelayRoundTrip(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	in, set, dlq, group := c.Key("in"), c.Key("delayed"), c.Key("dlq"), "workers"
	s := &sourcetest.Subject{Source: settle.Stream(c.Client, in, group, settle.Block(50*time.Millisecond))}
	attempts := make(chan int, 4)
	run := sourcetest.Start(t, s, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		attempts <- m.Attempt
		if m.Attempt == 1 {
			return settle.RetryAfter(100*time.Millisecond, errors.New("not yet"))
		}
		return nil
	}), settle.DelayIn(delayed.DurableZset{Key: set}), settle.MaxAttempts(3), settle.DeadLetter(dlq))

	ctx := context.Background()
	if _, err := settle.NewPublisher(c.Client).PublishBytes(ctx, in, []byte("later")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	events := run.WaitFor(t, "the delayed copy acked", 0, func(evs []settle.Settled) bool {
		for _, e := range evs {
			if e.Action == settle.ActionAck && e.Err == nil {
				return true
			}
		}
		return false
	})
	run.Stop(t)
	if len(events) != 2 || events[0].Action != settle.ActionPark || events[0].Err != nil || events[0].Delay != 100*time.Millisecond {
		t.Fatalf("settlements %+v, want a park of 100ms then an ack", events)
	}
	if got := []int{<-attempts, <-attempts}; got[0] != 1 || got[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", got)
	}
	if n := c.Client.ZCard(ctx, set).Val(); n != 0 {
		t.Fatalf("ZCARD %s = %d, want 0 (the copy was swept)", set, n)
	}
	if p, err := c.Client.XPending(ctx, in, group).Result(); err != nil || p.Count != 0 {
		t.Fatalf("XPENDING %s %s = %+v, %v; want 0 pending", in, group, p, err)
	}
}

// TestClusterCrossSlotConfigurationIsRefused proves that on a *redis.ClusterClient a
// stream whose dead-letter stream or delay set hashes to another slot stops startup
// with a message naming the keys and suggesting a {hash tag}, before anything is read.
func TestClusterCrossSlotConfigurationIsRefused(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	in := c.Key("in")
	tests := []struct {
		name  string
		other string
		opts  []settle.MountOption
	}{
		{name: "DeadLetter", other: c.Other("dlq"), opts: []settle.MountOption{settle.MaxAttempts(3), settle.DeadLetter(c.Other("dlq"))}},
		{name: "DurableZset", other: c.Other("delayed"), opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: c.Other("delayed")})}},
		{name: "DurableZsetBesideDeadLetter", other: c.Other("dlq"), opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: c.Key("delayed")}), settle.MaxAttempts(3), settle.DeadLetter(c.Other("dlq"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if keys.Slot(in) == keys.Slot(tt.other) {
				t.Fatalf("test premise: %s and %s share a slot", in, tt.other)
			}
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			called := make(chan struct{}, 1)
			app.Mount(settle.Stream(c.Client, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
				called <- struct{}{}
				return nil
			}), tt.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = app.Run(ctx)
			var ce *settle.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Run = %v, want a *settle.ConfigError", err)
			}
			msg := err.Error()
			for _, want := range []string{in, tt.other, "slot", "hash tag"} {
				if !strings.Contains(msg, want) {
					t.Fatalf("Run = %q, want it to name %q", msg, want)
				}
			}
			if n := c.Client.Exists(context.Background(), in).Val(); n != 0 {
				t.Fatalf("the stream %s exists: a refused App must not create its group", in)
			}
			select {
			case <-called:
				t.Fatal("the handler ran on a refused App")
			default:
			}
		})
	}
}

// newClusterStreamSubject returns a stream source made by mk on a fresh key of a
// cluster, with its dead-letter stream in the same slot; c, when not nil, is the App's
// clock.
func newClusterStreamSubject(t *testing.T, c *sourcetest.Clock, mk func(rdb redis.UniversalClient, in, group string) settle.Source) *sourcetest.Subject {
	r := redistest.Cluster(t)
	in, dlq, group := r.Key("in"), r.Key("dlq"), "workers"
	pub := settle.NewPublisher(r.Client)
	s := &sourcetest.Subject{
		DeadLetter: dlq,
		DeadLetters: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return sourcetest.ReadStreamDead(t, r.Client, dlq)
		},
		ReplyTo: r.Key("replies"),
		Replies: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return sourcetest.ReadStreamDead(t, r.Client, r.Key("replies"))
		},
		Pending: func(t testing.TB) int64 {
			t.Helper()
			p, err := r.Client.XPending(context.Background(), in, group).Result()
			if err != nil {
				t.Fatalf("xpending %s %s: %v", in, group, err)
			}
			return p.Count
		},
		Publish: func(t testing.TB, payload []byte, headers map[string]string) {
			t.Helper()
			if _, err := pub.PublishBytes(context.Background(), in, payload, settle.Headers(headers)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		},
		Source: mk(r.Client, in, group),
	}
	sourcetest.PauseByKey(s, r.Client, in, group)
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}

// newClusterListSubject returns a List (or a ReliableList with consumer "c") on a fresh
// key of a cluster, with its dead-letter list in the same slot.
func newClusterListSubject(t *testing.T, reliable bool) *sourcetest.Subject {
	r := redistest.Cluster(t)
	in, dlq := r.Key("in"), r.Key("dlq")
	pub := settle.NewPublisher(r.Client)
	s := &sourcetest.Subject{
		DeadLetter: dlq,
		DeadLetters: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return sourcetest.ReadListDead(t, r.Client, dlq)
		},
		Publish: func(t testing.TB, payload []byte, headers map[string]string) {
			t.Helper()
			if err := pub.PublishListBytes(context.Background(), in, payload, settle.Headers(headers)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		},
		Source: settle.List(r.Client, in),
	}
	sourcetest.PauseByKey(s, r.Client, in, "")
	if reliable {
		s.Source = settle.ReliableList(r.Client, in, settle.Consumer("c"))
		s.ReplyTo = r.Key("replies")
		s.Replies = func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return sourcetest.ReadListDead(t, r.Client, r.Key("replies"))
		}
		s.Peer = settle.ReliableList(r.Client, in, settle.Consumer("c2"))
		s.Pending = func(t testing.TB) int64 {
			t.Helper()
			var n int64
			for _, consumer := range []string{"c", "c2"} {
				k, err := r.Client.LLen(context.Background(), settle.ProcessingList(in, consumer)).Result()
				if err != nil {
					t.Fatalf("llen: %v", err)
				}
				n += k
			}
			return n
		}
	}
	return s
}
