package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/settletest"
)

// TestClaimingStreamConformance runs the conformance suite on ClaimingStream: retries
// stay pending and attempts come from Redis's delivery counter. On the wall clock (on
// miniredis, or on a real server with SETTLE_REDIS_URL) min-idle is 100ms; on a fake clock
// that also moves miniredis's clock it is 30s, which the suite's advances pass at once.
func TestClaimingStreamConformance(t *testing.T) {
	t.Parallel()
	features := sourcetest.Features{TakesLimits: true, UsesDeliveryCounter: true}

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, features, func(t *testing.T) *sourcetest.Subject {
			return newClaimingSubject(t, 100*time.Millisecond, false)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		if redistest.Real() {
			t.Skip("a fake clock cannot move a real server's idle times; runs on miniredis")
		}
		sourcetest.Run(t, features, func(t *testing.T) *sourcetest.Subject {
			return newClaimingSubject(t, 30*time.Second, true)
		})
	})
}

// newClaimingSubject returns a ClaimingStream with the given min-idle on a fresh stream
// of t's own Redis, with its dead-letter stream beside it; with fake, the App runs on a
// paused clock that moves miniredis's clock with it.
func newClaimingSubject(t *testing.T, minIdle time.Duration, fake bool) *sourcetest.Subject {
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
		Source: settle.ClaimingStream(r.Client, in, group, minIdle, settle.Block(50*time.Millisecond)),
	}
	sourcetest.PauseByKey(s, r.Client, in, group)
	if fake {
		c := settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
		c.AttachMiniredis(r.Mini)
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
