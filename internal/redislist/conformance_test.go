package redislist_test

import (
	"context"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestListConformance runs the conformance suite on List (which loses a retry without
// a cap) and ReliableList (which puts it back), on miniredis or, with SETTLE_REDIS_URL
// set, on a real server; each on the wall clock and on a fake clock.
func TestListConformance(t *testing.T) {
	t.Parallel()
	for _, reliable := range []bool{false, true} {
		name, f := "List", sourcetest.Features{LosesRetryWithoutCap: true, NoDedupe: true, RunsQueuedAtStop: true}
		if reliable {
			name, f = "ReliableList", sourcetest.Features{PutsBackWithoutCap: true, TakesLimits: true}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("RealClock", func(t *testing.T) {
				t.Parallel()
				sourcetest.Run(t, f, func(t *testing.T) *sourcetest.Subject { return newListSubject(t, reliable, nil) })
			})
			t.Run("FakeClock", func(t *testing.T) {
				t.Parallel()
				sourcetest.Run(t, f, func(t *testing.T) *sourcetest.Subject {
					return newListSubject(t, reliable, sourcetest.NewClock())
				})
			})
		})
	}
}

// newListSubject returns a List (or a ReliableList with consumer "c") on a fresh key of
// t's own Redis, with its dead-letter list beside it; c, when not nil, is the App's clock.
func newListSubject(t *testing.T, reliable bool, c *sourcetest.Clock) *sourcetest.Subject {
	r := redistest.New(t)
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
		s.ReplyTo = r.Key("replies")
		s.Replies = func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return sourcetest.ReadListDead(t, r.Client, r.Key("replies"))
		}
	}
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
