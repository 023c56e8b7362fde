package settle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// pauseProbe is a transport whose Paused answers from a script and counts its calls.
type pauseProbe struct {
	nopTransport
	mu      sync.Mutex
	answers []pauseAnswer
	calls   int
}

type pauseAnswer struct {
	paused bool
	err    error
}

func (p *pauseProbe) Paused(context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.answers[min(p.calls, len(p.answers)-1)]
	p.calls++
	return a.paused, a.err
}

// The read loop asks its transport at most once per pauseCheck of the App's clock; a
// failed check keeps the last state and warns once per streak of failures; each change
// is logged once at Info.
func TestPauseCheckIsCachedAndAFailedCheckKeepsTheLastState(t *testing.T) {
	down := errors.New("connection refused")
	probe := &pauseProbe{answers: []pauseAnswer{
		{paused: true}, {err: down}, {err: down}, {paused: false}, {err: down}, {paused: false},
	}}
	var logs bytes.Buffer
	c := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	m := &mount{eng: &engine{clock: c}, transport: probe, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := context.Background()
	var ps pauseState
	step := func(d time.Duration, want bool, calls int) {
		t.Helper()
		c.Advance(d)
		if got := m.paused(ctx, &ps); got != want {
			t.Fatalf("paused = %v, want %v", got, want)
		}
		if probe.calls != calls {
			t.Fatalf("the transport was asked %d times, want %d", probe.calls, calls)
		}
	}
	step(0, true, 1)            // the first check asks
	step(pauseCheck/2, true, 1) // within the period: the cached answer
	step(pauseCheck/2, true, 2) // a period later: asks, fails, keeps paused
	step(pauseCheck, true, 3)   // fails again: still paused, no second warning
	step(pauseCheck, false, 4)  // resumed
	step(pauseCheck, false, 5)  // fails: keeps resumed, warns (a new streak)
	step(pauseCheck-time.Nanosecond, false, 5)
	step(time.Nanosecond, false, 6)

	out := logs.String()
	for msg, want := range map[string]int{"settle: paused": 1, "settle: resumed": 1, "could not check whether the mount is paused": 2} {
		if n := strings.Count(out, msg); n != want {
			t.Errorf("logged %q %d times, want %d:\n%s", msg, n, want, out)
		}
	}
}
