package settletest_test

import (
	"testing"
	"time"

	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/settletest"
)

// TestBrokerConformance runs the conformance suite on a broker's topic, on the wall
// clock and on a fake Clock that the suite advances, and on a broker that cannot delay.
func TestBrokerConformance(t *testing.T) {
	t.Parallel()

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{NoDedupe: true}, func(t *testing.T) *sourcetest.Subject {
			return newTopicSubject(settletest.NewBroker(), nil)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{NoDedupe: true}, func(t *testing.T) *sourcetest.Subject {
			return newTopicSubject(settletest.NewBroker(), settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)))
		})
	})
	t.Run("WithoutDelays", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{NoDedupe: true}, func(t *testing.T) *sourcetest.Subject {
			return newTopicSubject(settletest.NewBroker(settletest.WithoutDelays()), settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)))
		})
	})
}

// topicMessages reads what waits in a topic, for the suite.
func topicMessages(t *settletest.Topic) []sourcetest.Dead {
	var out []sourcetest.Dead
	for _, d := range t.Messages() {
		out = append(out, sourcetest.Dead{Headers: d.Headers, Payload: d.Payload})
	}
	return out
}

func newTopicSubject(b *settletest.Broker, c *settletest.Clock) *sourcetest.Subject {
	mem := b.Topic("payments")
	s := &sourcetest.Subject{
		DeadLetter:  "payments.dead",
		DeadLetters: func(testing.TB) []sourcetest.Dead { return topicMessages(b.Topic("payments.dead")) },
		ReplyTo:     "payments.paid",
		Replies:     func(testing.TB) []sourcetest.Dead { return topicMessages(b.Topic("payments.paid")) },
		Pending:     func(testing.TB) int64 { return int64(mem.InFlight()) },
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
