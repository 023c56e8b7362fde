package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/clock"
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
		sourcetest.Run(t, sourcetest.Features{}, func(t *testing.T) *sourcetest.Subject {
			return newStreamSubject(t, nil)
		})
	})
	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		sourcetest.Run(t, sourcetest.Features{}, func(t *testing.T) *sourcetest.Subject {
			return newStreamSubject(t, newConformanceClock())
		})
	})
}

// newStreamSubject returns a Stream on a fresh stream key of t's own Redis, with its
// dead-letter stream beside it; c, when not nil, is the App's clock.
func newStreamSubject(t *testing.T, c *conformanceClock) *sourcetest.Subject {
	r := redistest.New(t)
	in, dlq, group := r.Key("in"), r.Key("dlq"), "workers"
	pub := settle.NewPublisher(r.Client)
	s := &sourcetest.Subject{
		DeadLetter: dlq,
		DeadLetters: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return readDeadLetters(t, r.Client, dlq)
		},
		ReplyTo: r.Key("replies"),
		Replies: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			return readDeadLetters(t, r.Client, r.Key("replies"))
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
	pauseByKey(s, r.Client, in, group)
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}

// readDeadLetters reads a dead-letter stream with XRANGE: the payload field is the
// payload, every other field a header.
func readDeadLetters(t testing.TB, rdb redis.UniversalClient, key string) []sourcetest.Dead {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("xrange %s: %v", key, err)
	}
	var out []sourcetest.Dead
	for _, m := range msgs {
		d := sourcetest.Dead{Headers: map[string]string{}}
		for k, v := range m.Values {
			s, ok := v.(string)
			if !ok {
				t.Fatalf("dead letter %s field %s is a %T, want a string", m.ID, k, v)
			}
			if k == "payload" {
				d.Payload = []byte(s)
				continue
			}
			d.Headers[k] = s
		}
		if d.Payload == nil {
			t.Fatalf("dead letter %s has no payload field: %v", m.ID, m.Values)
		}
		out = append(out, d)
	}
	return out
}

// conformanceClock is a fake clock that moves only by Advance.
type conformanceClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*conformanceTimer
}

func newConformanceClock() *conformanceClock {
	return &conformanceClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

// Advance moves the clock by d and fires the timers that came due.
func (c *conformanceClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.due.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

func (c *conformanceClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &conformanceTimer{c: c, ch: make(chan time.Time, 1), due: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

func (c *conformanceClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

type conformanceTimer struct {
	c   *conformanceClock
	ch  chan time.Time
	due time.Time
}

func (t *conformanceTimer) C() <-chan time.Time { return t.ch }

func (t *conformanceTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
