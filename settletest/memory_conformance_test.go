package settletest_test

import (
	"testing"
	"time"

	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/settletest"
)

// TestMemoryConformance runs the conformance suite on the in-memory source, on the wall
// clock and on a fake Clock that the suite advances.
func TestMemoryConformance(t *testing.T) {
	t.Parallel()

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{}, func(t *testing.T) *sourcetest.Subject {
			return newMemorySubject(nil)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{}, func(t *testing.T) *sourcetest.Subject {
			return newMemorySubject(settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)))
		})
	})
}

func newMemorySubject(c *settletest.Clock) *sourcetest.Subject {
	mem := settletest.NewMemory("payments")
	s := &sourcetest.Subject{
		DeadLetter: "payments.dead",
		DeadLetters: func(testing.TB) []sourcetest.Dead {
			var out []sourcetest.Dead
			for _, d := range mem.DeadLetters() {
				out = append(out, sourcetest.Dead{Headers: d.Headers, Payload: d.Payload})
			}
			return out
		},
		Pending: func(testing.TB) int64 { return int64(mem.InFlight()) },
		Publish: func(_ testing.TB, payload []byte, headers map[string]string) {
			mem.Publish(payload, headers)
		},
		Source: mem,
		Pause:  func(testing.TB) { mem.Pause() },
		Resume: func(testing.TB) { mem.Resume() },
	}
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
