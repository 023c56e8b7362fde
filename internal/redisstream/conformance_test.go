package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestStreamConformance runs the conformance suite on Stream, on miniredis or, with
// SETTLE_REDIS_URL set, on a real server; once on the wall clock and once on a fake
// clock that the suite advances.
func TestStreamConformance(t *testing.T) {
	t.Parallel()

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{TakesLimits: true}, func(t *testing.T) *sourcetest.Subject {
			return newStreamSubject(t, nil)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{TakesLimits: true}, func(t *testing.T) *sourcetest.Subject {
			return newStreamSubject(t, sourcetest.NewClock())
		})
	})
}

// newStreamSubject returns a Stream on a fresh stream key of t's own Redis, with its
// dead-letter stream beside it; c, when not nil, is the App's clock.
func newStreamSubject(t *testing.T, c *sourcetest.Clock) *sourcetest.Subject {
	r := redistest.New(t)
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
		Source: settle.Stream(r.Client, in, group, settle.Block(50*time.Millisecond)),
	}
	sourcetest.PauseByKey(s, r.Client, in, group)
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
