package sourcetest

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// call is one handler call as the handler saw it.
type call struct {
	at      time.Time // on the App's clock
	attempt int
	headers map[string]string
	id      string
	payload []byte
}

// calls records the handler calls of one scenario.
type calls struct {
	subject *Subject

	mu   sync.Mutex
	list []call
	wake chan struct{}
}

func newCalls(s *Subject) *calls { return &calls{subject: s, wake: make(chan struct{})} }

// handler returns a Handler that records each call, then returns fn's answer; n is the
// call's number, 1-based.
func (c *calls) handler(fn func(ctx context.Context, m *settle.Message, n int) error) settle.Handler {
	return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		return fn(ctx, m, c.record(m))
	})
}

func (c *calls) record(m *settle.Message) int {
	cl := call{at: c.subject.now(), attempt: m.Attempt, headers: maps.Clone(m.Headers), id: m.ID, payload: append([]byte(nil), m.Payload...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, cl)
	close(c.wake)
	c.wake = make(chan struct{})
	return len(c.list)
}

// all returns the calls so far.
func (c *calls) all() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.list...)
}

// waitN waits until at least n calls were made and returns them, advancing a fake
// clock by step while it waits (see Running.WaitFor).
func (c *calls) waitN(t testing.TB, n int, step time.Duration) []call {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	var tick <-chan time.Time
	if c.subject.Advance != nil && step > 0 {
		ticker := time.NewTicker(nudgeEvery)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		c.mu.Lock()
		got := append([]call(nil), c.list...)
		wake := c.wake
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-wake:
		case <-tick:
			c.subject.Advance(step)
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for handler call %d; got %d calls", waitTimeout, n, len(got))
		}
	}
}
