package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/settletest"
)

// limitsBundle is an App whose mount runs under four flow limits, with three
// deliveries of three accounts running and held, and an Inspector.
type limitsBundle struct {
	h       *settletest.Harness
	in      string
	insp    *admin.Inspector
	limits  []admin.FlowLimit
	release chan struct{}
}

// setupLimits starts the App and waits for its three deliveries to run.
func setupLimits(t *testing.T) *limitsBundle {
	t.Helper()
	h := settletest.New(t)
	b := &limitsBundle{h: h, in: h.Redis.Key("limits"), insp: admin.NewInspector(h.Redis.Client), release: make(chan struct{})}
	b.limits = []admin.FlowLimit{
		{Kind: admin.LimitRate, N: 3, Per: time.Second, Burst: 3},
		{Kind: admin.LimitRateBy, N: 1, Per: time.Minute},
		{Kind: admin.LimitConcurrencyBy, N: 1},
		{Kind: admin.LimitGlobalConcurrency, N: 5},
	}
	acct := func(m *settle.Message) string { return m.Headers["acct"] }
	started := make(chan struct{}, 3)
	h.Mount(settle.Stream(h.Redis.Client, b.in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		started <- struct{}{}
		<-b.release
		return nil
	}), settle.RateLimit(3, time.Second, settle.LimitBurst(3)), settle.RateLimitBy(acct, 1, time.Minute),
		settle.ConcurrencyBy(acct, 1), settle.GlobalConcurrency(5))
	h.Start()
	for _, a := range []string{"a-1", "a-2", "a-3"} {
		h.Publish(b.in, a, settle.Headers(map[string]string{"acct": a}))
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(waitBound):
			t.Fatal("the three deliveries did not start")
		}
	}
	t.Cleanup(func() { close(b.release); h.Stop() })
	return b
}

// Limits reads each limit's state from the keys the engine's scripts write: the
// mount-wide rate's starts given ahead of now and that it is at its limit, the per-key
// limits' values at their limit, and the slots in use against the global cap.
func TestLimitsShowsEachLimitsRateUseAndKeysAtTheirLimit(t *testing.T) {
	t.Parallel()
	b := setupLimits(t)
	got, err := b.insp.Limits(context.Background(), b.in, "g", b.limits, admin.LimitsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("Limits returned %d states, want 4: %+v", len(got), got)
	}
	if r := got[0]; r.Rate != 3 || r.InUse < 3 || !r.AtLimit {
		t.Errorf("RateLimit(3, 1s, burst 3) after 3 starts: %+v, want rate 3/s, 3 starts ahead, at its limit", r)
	}
	for _, k := range got[1:3] {
		if k.Keys != 3 || k.KeysAtLimit != 3 || k.InUse != 3 || len(k.AtLimitValues) != 3 || k.AtLimitValues[0].Value != "a-1" || k.AtLimitValues[2].Value != "a-3" {
			t.Errorf("%s with one delivery of each of 3 accounts: %+v, want a-1, a-2, a-3 at their limit", k.Limit, k)
		}
	}
	if g := got[3]; g.InUse != 3 || g.AtLimit || g.Keys != 0 {
		t.Errorf("GlobalConcurrency(5) with 3 running: %+v, want 3 in use, not at its limit", g)
	}
}

// A per-key limit lists at most LimitsOptions.Keys of its values at their limit and
// counts the rest.
func TestLimitsListsABoundedNumberOfKeysAtTheirLimit(t *testing.T) {
	t.Parallel()
	b := setupLimits(t)
	got, err := b.insp.Limits(context.Background(), b.in, "g", b.limits, admin.LimitsOptions{Keys: 1})
	if err != nil {
		t.Fatal(err)
	}
	if k := got[2]; len(k.AtLimitValues) != 1 || k.KeysAtLimit != 3 {
		t.Fatalf("ConcurrencyBy with Keys: 1: %+v, want 1 value listed of 3 at their limit", k)
	}
}

// A limit of an unknown kind, or with n or its period not positive, is refused naming
// it; a limit without state (nothing ran) reads as idle.
func TestLimitsRefusesABadLimitAndReadsAnIdleOneAsIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, l := range []admin.FlowLimit{{Kind: "nope", N: 1}, {Kind: admin.LimitRate, N: 0, Per: time.Second}, {Kind: admin.LimitRateBy, N: 1}} {
		if _, err := b.insp.Limits(b.ctx, b.in, b.group, []admin.FlowLimit{l}, admin.LimitsOptions{}); err == nil {
			t.Errorf("Limits(%s) = nil error, want a refusal", l)
		}
	}
	got, err := b.insp.Limits(b.ctx, b.in, b.group, []admin.FlowLimit{{Kind: admin.LimitRate, N: 50, Per: time.Second}, {Kind: admin.LimitConcurrencyBy, N: 2}}, admin.LimitsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].InUse != 0 || got[0].AtLimit || got[0].Rate != 50 || got[1].Keys != 0 || got[1].AtLimit {
		t.Fatalf("idle limits: %+v, want nothing in use", got)
	}
}

// Limits counts the deliveries waiting for each limit as the consuming processes report
// them (every second while some wait): a second delivery of a-1 waits for
// ConcurrencyBy's slot of a-1, which its first holds.
func TestLimitsCountsTheDeliveriesWaitingForEachLimit(t *testing.T) {
	t.Parallel()
	b := setupLimits(t)
	b.h.Publish(b.in, "a-1 again", settle.Headers(map[string]string{"acct": "a-1"}))
	// Every second the process reports what waits: move the clock on until a report
	// counts the delivery (read and waiting by then).
	deadline := time.After(waitBound)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for round := 0; ; round++ {
		if round%20 == 0 {
			b.h.Advance(time.Second)
		}
		got, err := b.insp.Limits(context.Background(), b.in, "g", b.limits, admin.LimitsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got[2].Waiting == 1 {
			if got[0].Waiting+got[1].Waiting+got[3].Waiting != 0 {
				t.Fatalf("waiting %d, %d, %d, %d; want only ConcurrencyBy's 1", got[0].Waiting, got[1].Waiting, got[2].Waiting, got[3].Waiting)
			}
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("ConcurrencyBy's waiting reads %d, want 1", got[2].Waiting)
		}
	}
}
