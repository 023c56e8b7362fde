package sourcetest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// The flow limits' scenarios (settle.RateLimit, RateLimitBy, ConcurrencyBy): run where
// Features.TakesLimits, refused at startup elsewhere.

// limitSeq tells the scenarios' messages apart: a list holds values, and two equal
// items are one value twice.
var limitSeq atomic.Int64

// limitMessage publishes one message whose "k" header is key.
func limitMessage(t *testing.T, s *Subject, key string) {
	t.Helper()
	payload, err := settle.Msgpack.Marshal(map[string]any{"k": key, "seq": limitSeq.Add(1)})
	if err != nil {
		t.Fatal(err)
	}
	s.Publish(t, payload, map[string]string{"k": key})
}

// byHeader is the scenarios' key function: the "k" header.
func byHeader(m *settle.Message) string { return m.Headers["k"] }

// checkLimitRefusal checks that an App mounting s.Source with opts refuses to start,
// with a reason containing want.
func checkLimitRefusal(t *testing.T, s *Subject, want string, opts ...settle.MountOption) {
	t.Helper()
	app, err := settle.New(s.Config)
	if err != nil {
		t.Fatalf("settle.New: %v", err)
	}
	app.Mount(s.Source, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), opts...)
	err = app.Validate()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("App.Validate returned %v, want a refusal saying %q", err, want)
	}
}

func testBadLimitsRefusedAtStartup(t *testing.T, f Features, s *Subject) {
	for _, c := range []struct {
		name, want string
		opt        settle.MountOption
	}{
		{"ZeroRate", "n is 0", settle.RateLimit(0, time.Second)},
		{"ZeroPeriod", "the period is 0s", settle.RateLimit(1, 0)},
		{"NegativePeriodBy", "the period is -1s", settle.RateLimitBy(byHeader, 1, -time.Second)},
		{"ZeroBurst", "the burst must be at least 1", settle.RateLimit(1, time.Second, settle.LimitBurst(0))},
		{"NilRateKey", "RateLimitBy(nil, …)", settle.RateLimitBy(nil, 1, time.Second)},
		{"NilSlotKey", "ConcurrencyBy(nil, …)", settle.ConcurrencyBy(nil, 1)},
		{"ZeroSlots", "n is 0", settle.ConcurrencyBy(byHeader, 0)},
		{"NegativeGlobal", "n is -2", settle.GlobalConcurrency(-2)},
	} {
		checkLimitRefusal(t, s, c.want, c.opt)
	}
}

func testLimitsRefusedWhereTheyCannotWait(t *testing.T, f Features, s *Subject) {
	if f.TakesLimits {
		t.Skip("the transport takes flow limits")
	}
	checkLimitRefusal(t, s, "RateLimit: refused on a", settle.RateLimit(1, time.Second))
	checkLimitRefusal(t, s, "ConcurrencyBy: refused on a", settle.ConcurrencyBy(byHeader, 1))
}

// limitPeriod is a rate limit's period in the scenarios: long on a fake clock (the
// suite moves it), short on the wall clock.
func limitPeriod(s *Subject) time.Duration {
	if s.Advance != nil {
		return time.Second
	}
	return 500 * time.Millisecond
}

func testRateLimitSpacesStartsAndSpendsNoAttempt(t *testing.T, f Features, s *Subject) {
	if !f.TakesLimits {
		t.Skip("the transport refuses flow limits")
	}
	per := limitPeriod(s)
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error { return nil }), settle.RateLimit(1, per, settle.LimitBurst(2)))
	for range 5 {
		limitMessage(t, s, "a")
	}
	run.WaitFor(t, "five acks", per/100, finals(5))
	run.Stop(t)
	cs := c.all()
	// A burst of two, then one start per period: the i-th call (0-based, i >= 1) no
	// sooner than (i-1) periods after the first. A call records the clock once its
	// handler runs, which nudges (per/100 each) may have moved since its start was let
	// through: the tolerance is twenty of them.
	for i := 2; i < len(cs); i++ {
		if got, want := cs[i].at.Sub(cs[0].at), time.Duration(i-1)*per; got < want-per/5 {
			t.Fatalf("call %d started %s after the first, want at least %s (RateLimit(1, %s) with a burst of 2)", i+1, got, want, per)
		}
	}
	for _, cl := range cs {
		if cl.attempt != 1 {
			t.Fatalf("a call saw attempt %d, want 1: waiting for a rate limit spends no attempt", cl.attempt)
		}
	}
	checkNothingPending(t, s)
}

func testHotKeyAtItsLimitDoesNotHoldUpOtherKeys(t *testing.T, f Features, s *Subject) {
	if !f.TakesLimits {
		t.Skip("the transport refuses flow limits")
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error { return nil }), settle.RateLimitBy(byHeader, 1, time.Hour))
	for range 6 {
		limitMessage(t, s, "hot")
	}
	limitMessage(t, s, "cold")
	// The clock does not move: the hot key's second start is an hour away, and the cold
	// key's message, read behind five waiting hot ones, starts at once.
	run.WaitFor(t, "the hot key's first and the cold key's message", 0, finals(2))
	var keys []string
	for _, cl := range c.waitN(t, 2, 0) {
		keys = append(keys, cl.headers["k"])
	}
	if strings.Join(keys, ",") != "hot,cold" && strings.Join(keys, ",") != "cold,hot" {
		t.Fatalf("started %v, want one hot and the cold", keys)
	}
	run.Stop(t)
	if n := len(c.all()); n != 2 {
		t.Fatalf("%d calls, want 2: the hot key's others wait an hour", n)
	}
	// The five that waited were handed back at the stop, none of them spent: a restart
	// without the limit runs them, each at its first attempt.
	again := newCalls(s)
	rerun := Start(t, s, again.handler(func(context.Context, *settle.Message, int) error { return nil }))
	rerun.WaitFor(t, "the five that waited", retryStep, finals(5))
	rerun.Stop(t)
	for _, cl := range again.all() {
		if cl.headers["k"] != "hot" || cl.attempt != 1 {
			t.Fatalf("after the restart a call of key %q saw attempt %d, want the hot key's at attempt 1", cl.headers["k"], cl.attempt)
		}
	}
	checkNothingPending(t, s)
}

func testConcurrencyByOneIsExclusiveAcrossApps(t *testing.T, f Features, s *Subject) {
	if !f.TakesLimits {
		t.Skip("the transport refuses flow limits")
	}
	var mu sync.Mutex
	running, most := 0, 0
	otherDone := make(chan struct{})
	c := newCalls(s)
	h := c.handler(func(_ context.Context, m *settle.Message, _ int) error {
		if m.Headers["k"] == "other" {
			close(otherDone)
			return nil
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		// Held until the other key ran: a second delivery of this key started meanwhile,
		// in either App, would be seen running beside it.
		<-otherDone
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	opt := settle.ConcurrencyBy(byHeader, 1)
	one := Start(t, s, h, opt)
	peer := *s
	if s.Peer != nil {
		peer.Source = s.Peer // two processes read under two consumer names
	}
	two := Start(t, &peer, h, opt)
	limitMessage(t, s, "acct")
	limitMessage(t, s, "acct")
	c.waitN(t, 1, 0)
	if s.Pending != nil {
		waitSignal(t, waitTimeout, func() {}, func() (bool, <-chan struct{}) { return s.Pending(t) == 2, nil }, func() {
			t.Fatal("the second message of the key was not delivered")
		})
	}
	limitMessage(t, s, "other")
	stop := func() {}
	if s.Advance != nil {
		// Small steps: the waiting delivery asks again every flow.SlotPoll, while a slow
		// run must not carry the fake clock past the Apps' heartbeats (a takeover).
		stop = nudgeUntil(s.Advance, time.Millisecond)
	}
	waitSignal(t, waitTimeout, func() {}, func() (bool, <-chan struct{}) {
		return len(one.Recorder.Events())+len(two.Recorder.Events()) >= 3, nil
	}, func() { t.Fatal("timed out waiting for three settlements") })
	stop()
	one.Stop(t)
	two.Stop(t)
	if most != 1 {
		t.Fatalf("at most %d deliveries of one key ran at once, want 1 (ConcurrencyBy(…, 1) over two Apps)", most)
	}
	for _, cl := range c.all() {
		if cl.attempt != 1 {
			t.Fatalf("a call saw attempt %d, want 1: waiting for a slot spends no attempt", cl.attempt)
		}
	}
	checkNothingPending(t, s)
}
