package sourcetest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// message returns the payload and headers a scenario publishes: a msgpack value, and a
// user header unless the transport carries none.
func message(t *testing.T, f Features) ([]byte, map[string]string) {
	t.Helper()
	payload, err := settle.Msgpack.Marshal(map[string]any{"scenario": t.Name(), "amount": 1250})
	if err != nil {
		t.Fatal(err)
	}
	if f.NoHeaders {
		return payload, nil
	}
	return payload, map[string]string{"trace": "t-" + t.Name()[strings.LastIndex(t.Name(), "/")+1:], "tenant": "north"}
}

// ordered sorts settlements by attempt, a delivery's non-final settlements before its
// final one, and counts an in-process delay (park, then copy) as one. OnSettled reports each settlement once applied, and a retry copy may be
// delivered and settled before its original's settlement is reported, so the order
// events arrive in says nothing.
func ordered(evs []settle.Settled) []settle.Settled {
	rank := func(e settle.Settled) int {
		if e.Final() {
			return 2*e.Attempt + 1
		}
		return 2 * e.Attempt
	}
	slices.SortStableFunc(evs, func(a, b settle.Settled) int { return cmp.Compare(rank(a), rank(b)) })
	// An in-process delay is reported twice: parked, then its copy written when due. One
	// retry is one settlement here: the copy's event goes, unless it failed.
	type key struct {
		attempt int
		id      string
	}
	parked := map[key]bool{}
	for _, e := range evs {
		if e.Action == settle.ActionPark {
			parked[key{e.Attempt, e.ID}] = true
		}
	}
	return slices.DeleteFunc(evs, func(e settle.Settled) bool {
		return e.Action == settle.ActionCopy && e.Err == nil && parked[key{e.Attempt, e.ID}]
	})
}

// finals reports whether at least n settlements were final.
func finals(n int) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool { return Finals(evs) >= n }
}

// hasAction reports whether a settlement with action a was applied.
func hasAction(a settle.Action) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool {
		for _, e := range evs {
			if e.Action == a && e.Err == nil {
				return true
			}
		}
		return false
	}
}

// checkApplied fails t if a settlement failed to apply.
func checkApplied(t *testing.T, evs []settle.Settled) {
	t.Helper()
	for _, e := range evs {
		if e.Err != nil {
			t.Fatalf("settlement %s failed: %v", describeOne(e), e.Err)
		}
	}
}

func checkEvent(t *testing.T, e settle.Settled, action settle.Action, outcome settle.OutcomeKind, attempt int) {
	t.Helper()
	if e.Action != action || e.Outcome != outcome || e.Attempt != attempt {
		t.Fatalf("got %s, want action %s, outcome %s, attempt %d", describeOne(e), action, outcome, attempt)
	}
}

func checkCall(t *testing.T, f Features, c call, attempt int, payload []byte, headers map[string]string) {
	t.Helper()
	if c.attempt != attempt {
		t.Fatalf("the handler saw attempt %d, want %d", c.attempt, attempt)
	}
	if string(c.payload) != string(payload) {
		t.Fatalf("the handler saw payload %q, want %q as published", c.payload, payload)
	}
	if c.headers == nil {
		t.Fatal("the handler saw nil headers, want a map (never nil)")
	}
	if f.NoHeaders {
		return
	}
	for k, v := range headers {
		if got, ok := c.headers[k]; !ok || got != v {
			t.Fatalf("the handler saw header %s=%q, want %q as published (headers %v)", k, got, v, c.headers)
		}
	}
}

func checkDeadLetter(t *testing.T, f Features, d Dead, payload []byte, headers map[string]string, e settle.Settled, retryCount, errorPart string) {
	t.Helper()
	if string(d.Payload) != string(payload) {
		t.Fatalf("dead letter payload %q, want %q as published", d.Payload, payload)
	}
	if f.NoHeaders {
		return
	}
	want := maps.Clone(headers)
	want[settle.HeaderRetryCount] = retryCount
	want[settle.HeaderDeadSource] = e.Key
	want[settle.HeaderDeadID] = e.ID
	for k, v := range want {
		if got, ok := d.Headers[k]; !ok || got != v {
			t.Fatalf("dead letter header %s=%q, want %q (headers %v)", k, got, v, d.Headers)
		}
	}
	if d.Headers[settle.HeaderDeadReason] == "" {
		t.Fatalf("dead letter has no %s (headers %v)", settle.HeaderDeadReason, d.Headers)
	}
	if got := d.Headers[settle.HeaderDeadError]; !strings.Contains(got, errorPart) {
		t.Fatalf("dead letter %s=%q, want it to contain %q", settle.HeaderDeadError, got, errorPart)
	}
}

func checkNoDeadLetters(t *testing.T, s *Subject) {
	t.Helper()
	if dls := s.DeadLetters(t); len(dls) != 0 {
		t.Fatalf("got %d dead letters, want none: %+v", len(dls), dls)
	}
}

func checkNothingPending(t *testing.T, s *Subject) {
	t.Helper()
	if s.Pending == nil {
		return
	}
	if n := s.Pending(t); n != 0 {
		t.Fatalf("got %d messages delivered and not settled, want 0", n)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
}

// nudgeUntil advances a fake clock by step every few milliseconds until the returned
// stop is called.
func nudgeUntil(advance func(time.Duration), step time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ticker := time.NewTicker(nudgeEvery)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				advance(step)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func describeOne(e settle.Settled) string {
	s := fmt.Sprintf("{%s attempt=%d outcome=%s id=%s", e.Action, e.Attempt, e.Outcome, e.ID)
	if e.Delay > 0 {
		s += fmt.Sprintf(" delay=%s", e.Delay)
	}
	if e.HandlerErr != nil {
		s += fmt.Sprintf(" handler_err=%q", e.HandlerErr)
	}
	if e.Err != nil {
		s += fmt.Sprintf(" err=%q", e.Err)
	}
	return s + "}"
}

func describe(evs []settle.Settled) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = describeOne(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkRefused checks that an App mounting s.Source with opts refuses to start.
func checkRefused(t *testing.T, s *Subject, opts ...settle.MountOption) {
	t.Helper()
	app, err := settle.New(s.Config)
	if err != nil {
		t.Fatalf("settle.New: %v", err)
	}
	app.Mount(s.Source, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), opts...)
	if err := app.Validate(); err == nil {
		t.Fatal("App.Validate returned nil, want a refusal of the policy")
	}
}
