package sourcetest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/settlekit/settle"
)

// headerPrev is the header the hooks scenario's Move hook adds to every written copy:
// the attempt that wrote it, as a tracer's link to the previous attempt would.
const headerPrev = settle.HeaderPrefix + "x-prev"

// hookLog records what an App's Hooks saw.
type hookLog struct {
	mu      sync.Mutex
	starts  []settle.DeliveryStart
	settled []settle.Settled
	moves   []settle.Action
	wrong   []string // contexts that did not carry their delivery's value
}

type hookKey struct{}

func (l *hookLog) hooks() settle.Hooks {
	return settle.Hooks{
		Delivery: func(ctx context.Context, d settle.DeliveryStart) context.Context {
			l.mu.Lock()
			l.starts = append(l.starts, d)
			l.mu.Unlock()
			return context.WithValue(ctx, hookKey{}, d.Attempt)
		},
		Move: func(ctx context.Context, s settle.Settled, h map[string]string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.moves = append(l.moves, s.Action)
			if ctx.Value(hookKey{}) != s.Attempt {
				l.wrong = append(l.wrong, fmt.Sprintf("move of attempt %d", s.Attempt))
			}
			h[headerPrev] = strconv.Itoa(s.Attempt)
		},
		Settled: func(ctx context.Context, s settle.Settled) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.settled = append(l.settled, s)
			if ctx.Value(hookKey{}) != s.Attempt {
				l.wrong = append(l.wrong, fmt.Sprintf("settlement of attempt %d (%s)", s.Attempt, s.Action))
			}
		},
	}
}

// testHooksFollowOneMessage: the Delivery hook sees each delivery start and its context
// reaches the handler, the Move hook and the Settled hook; every report names the
// transport and the message by one key across its copies; headers the Move hook adds
// travel with the copy and the dead letter.
func testHooksFollowOneMessage(t *testing.T, f Features, s *Subject) {
	var l hookLog
	hs := *s
	hs.Config.Hooks = l.hooks()
	c := newCalls(&hs)
	run := Start(t, &hs, c.handler(func(ctx context.Context, m *settle.Message, _ int) error {
		if ctx.Value(hookKey{}) != m.Attempt {
			return settle.Drop(fmt.Errorf("attempt %d: the handler's context lacks the Delivery hook's value", m.Attempt))
		}
		return fmt.Errorf("attempt %d failed", m.Attempt)
	}), settle.MaxAttempts(2), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the dead letter", retryStep, finals(1))
	run.Stop(t)

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.wrong) > 0 {
		t.Fatalf("hook contexts without their delivery's value: %v", l.wrong)
	}
	if len(l.starts) != 2 || l.starts[0].Attempt != 1 || l.starts[1].Attempt != 2 {
		t.Fatalf("Delivery hook saw %+v, want attempts 1 and 2", l.starts)
	}
	first := l.starts[0]
	if first.Transport == "" || first.Mount == "" || first.Key == "" || first.MessageKey == "" {
		t.Fatalf("Delivery hook saw %+v, want its transport, mount, key and message key", first)
	}
	if l.starts[1].MessageKey != first.MessageKey {
		t.Fatalf("message key %q on attempt 2, %q on attempt 1: want one key across copies", l.starts[1].MessageKey, first.MessageKey)
	}
	var settled []settle.Settled // an in-process delay's due copy is reported apart (Due)
	for _, e := range l.settled {
		if !e.Due {
			settled = append(settled, e)
		} else if e.Late < 0 || e.HandlerDuration != 0 {
			t.Fatalf("due copy %+v: want a lateness and no handler duration", e)
		}
	}
	if len(settled) != 2 {
		t.Fatalf("Settled hook saw %d settlements, want 2: %s", len(settled), describe(l.settled))
	}
	for _, e := range l.settled {
		if e.Transport != first.Transport || e.Group != first.Group || e.MessageKey != first.MessageKey || e.HandlerDuration < 0 || e.SettleDuration < 0 {
			t.Fatalf("settlement %+v, want transport %q, group %q, message key %q and durations", e, first.Transport, first.Group, first.MessageKey)
		}
		if e.Redelivery {
			t.Fatalf("settlement %s is marked a redelivery; every delivery here settled", describeOne(e))
		}
	}
	// The later attempt's: a park is reported once its copy is scheduled, from the
	// handler's goroutine, which a loaded machine may hold until the copy has run.
	last := settled[1]
	if settled[0].Attempt > last.Attempt {
		last = settled[0]
	}
	if last.Action != settle.ActionDeadLetter {
		t.Fatalf("last settlement %s, want the dead letter", describeOne(last))
	}
	if len(l.moves) == 0 || l.moves[len(l.moves)-1] != settle.ActionDeadLetter {
		t.Fatalf("Move hook saw %v, want the dead letter last", l.moves)
	}
	if f.NoHeaders {
		return
	}
	if cs := c.all(); !f.UsesDeliveryCounter && (len(cs) != 2 || cs[1].headers[headerPrev] != "1") {
		t.Fatalf("calls %+v: want attempt 2's copy to carry %s=1, the header the Move hook added", cs, headerPrev)
	}
	dls := s.DeadLetters(t)
	if len(dls) != 1 || dls[0].Headers[headerPrev] != "2" || dls[0].Headers[settle.HeaderOriginID] == "" {
		t.Fatalf("dead letters %+v: want one carrying %s=2 and %s", dls, headerPrev, settle.HeaderOriginID)
	}
}
