package flow_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/flow"
	"github.com/settlekit/settle/internal/source"
)

// slotStore is a Limiter of one concurrency slot per value, in memory.
type slotStore struct {
	mu    sync.Mutex
	owner map[string]string
}

func (s *slotStore) LimitTake(_ context.Context, gates []source.Gate, token string, _ time.Duration) (source.Take, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, g := range gates {
		if _, ok := s.owner[g.Value]; ok {
			return source.Take{Wait: time.Hour, Which: i}, nil
		}
	}
	for _, g := range gates {
		s.owner[g.Value] = token
	}
	return source.Take{Which: -1}, nil
}

func (s *slotStore) LimitRenew(context.Context, []source.Held, time.Duration) ([]int, error) {
	return nil, nil
}

func (s *slotStore) LimitRelease(_ context.Context, held []source.Held) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range held {
		if s.owner[h.Value] == h.Token {
			delete(s.owner, h.Value)
		}
	}
	return nil
}

type testBundle struct {
	gate    *flow.Gate
	resumed chan *source.Delivery
}

func setup(t *testing.T, maxWaiting int) *testBundle {
	t.Helper()
	b := &testBundle{resumed: make(chan *source.Delivery, 10)}
	b.gate = flow.New(flow.Config{
		Clock:      clock.NewFake(time.Unix(0, 0)),
		Lease:      time.Minute,
		Limits:     []flow.Limit{{N: 1, KeyFunc: func(d *source.Delivery) string { return d.Key }}},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxWaiting: maxWaiting,
		Resume:     func(d *source.Delivery) bool { b.resumed <- d; return true },
		Store:      &slotStore{owner: map[string]string{}},
	})
	b.gate.Start(context.Background())
	t.Cleanup(b.gate.Close)
	return b
}

func TestDoneWakesAWaiterOfItsKeyAtOnceWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	ctx := context.Background()
	first, second := &source.Delivery{ID: "1", Key: "a"}, &source.Delivery{ID: "2", Key: "a"}
	ticket, ok := b.gate.Admit(ctx, first)
	if !ok {
		t.Fatal("the first delivery of a key waits")
	}
	if _, ok := b.gate.Admit(ctx, second); ok {
		t.Fatal("the second delivery of a key started beside the first")
	}
	b.gate.Done(ctx, ticket) // the fake clock never moves: only the release can wake it
	select {
	case d := <-b.resumed:
		if d != second {
			t.Fatalf("resumed %s, want the waiting delivery", d.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting delivery was not resumed when the slot was freed")
	}
	if _, ok := b.gate.Admit(ctx, second); !ok {
		t.Fatal("the resumed delivery cannot take the freed slot")
	}
	b.gate.Stop(ctx)
}

func TestStopHandsBackEveryWaitingDeliveryAndRoomBlocksAtTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx := context.Background()
	if _, ok := b.gate.Admit(ctx, &source.Delivery{ID: "1", Key: "a"}); !ok {
		t.Fatal("the first delivery waits")
	}
	b.gate.Admit(ctx, &source.Delivery{ID: "2", Key: "a"})
	b.gate.Admit(ctx, &source.Delivery{ID: "3", Key: "a"})
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if b.gate.Room(short) {
		t.Fatal("Room let the mount read with MaxWaiting deliveries waiting")
	}
	if got := len(b.gate.Stop(ctx)); got != 2 {
		t.Fatalf("Stop handed back %d deliveries, want the 2 waiting", got)
	}
	if !b.gate.Room(ctx) {
		t.Fatal("Room blocks once the waiting deliveries were handed back")
	}
}

// rateOnly is the part of a Limiter a store of rate limits only needs: no slot is held,
// so nothing is renewed or released.
type rateOnly struct{}

func (rateOnly) LimitRenew(context.Context, []source.Held, time.Duration) ([]int, error) {
	return nil, nil
}

func (rateOnly) LimitRelease(context.Context, []source.Held) error { return nil }

// rateStore is a Limiter of one rate limit: it reserves its first take's start wait
// ahead, lets every later take start at once, and moves the fake clock by slow on each
// answer (a slow round trip).
type rateStore struct {
	rateOnly
	clock *clock.Fake
	wait  time.Duration
	slow  time.Duration
	mu    sync.Mutex
	takes int
}

func (s *rateStore) LimitTake(context.Context, []source.Gate, string, time.Duration) (source.Take, error) {
	s.mu.Lock()
	s.takes++
	first := s.takes == 1
	s.mu.Unlock()
	s.clock.Advance(s.slow)
	if first && s.wait > 0 {
		return source.Take{Wait: s.wait, Which: 0, Reserved: true}, nil
	}
	return source.Take{Which: -1}, nil
}

func (s *rateStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes
}

// rateGate runs a gate of RateLimit(10, time.Second) (a slack of 20 ms) over store.
func rateGate(t *testing.T, store *rateStore) (*flow.Gate, chan *source.Delivery) {
	t.Helper()
	return limitGate(t, store.clock, store, flow.Limit{N: 10, Per: time.Second, Burst: 1})
}

// limitGate runs a gate of one limit over store on c; resumed receives what it resumes.
func limitGate(t *testing.T, c clock.Clock, store source.Limiter, l flow.Limit) (*flow.Gate, chan *source.Delivery) {
	t.Helper()
	resumed := make(chan *source.Delivery, 10)
	g := flow.New(flow.Config{
		Clock:      c,
		Lease:      time.Minute,
		Limits:     []flow.Limit{l},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxWaiting: 10,
		Resume:     func(d *source.Delivery) bool { resumed <- d; return true },
		Store:      store,
	})
	g.Start(context.Background())
	t.Cleanup(g.Close)
	return g, resumed
}

func TestReservedStartThatComesLaterThanTheSlackIsGivenUpAndAsksAgain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		after time.Duration // how far past its reserved start the clock moves at once
		takes int
		late  int64
	}{
		{"within the slack", flow.Slack(time.Second), 1, 0},
		{"past the slack", flow.Slack(time.Second) + time.Millisecond, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := clock.NewFake(time.Unix(0, 0))
			store := &rateStore{clock: fake, wait: 100 * time.Millisecond}
			g, resumed := rateGate(t, store)
			ctx := context.Background()
			d := &source.Delivery{ID: "1"}
			if _, ok := g.Admit(ctx, d); ok {
				t.Fatal("a delivery whose start was reserved 100ms ahead started at once")
			}
			fake.Advance(100*time.Millisecond + c.after) // its timer fires late by after
			select {
			case <-resumed:
			case <-time.After(5 * time.Second):
				t.Fatal("the reserved delivery was not resumed")
			}
			if _, ok := g.Admit(ctx, d); !ok {
				t.Fatal("the resumed delivery did not start")
			}
			if got := store.count(); got != c.takes {
				t.Fatalf("%d takes, want %d: a start at most the slack late keeps its place, a later one gives it up and asks again", got, c.takes)
			}
			if got := g.Late(); got != c.late {
				t.Fatalf("Late() = %d, want %d", got, c.late)
			}
			g.Stop(ctx)
		})
	}
}

func TestStartWhoseTakeAnsweredLaterThanTheSlackAsksAgainUpToMaxLate(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Unix(0, 0))
	// Every answer comes back later than the slack: the delivery gives its start up
	// MaxLate times, then starts however late rather than never.
	store := &rateStore{clock: fake, slow: flow.Slack(time.Second) + time.Millisecond}
	g, _ := rateGate(t, store)
	ctx := context.Background()
	if _, ok := g.Admit(ctx, &source.Delivery{ID: "1"}); !ok {
		t.Fatal("the delivery did not start after MaxLate late answers")
	}
	if got, want := store.count(), flow.MaxLate+1; got != want {
		t.Fatalf("%d takes, want %d (MaxLate given up, then one kept)", got, want)
	}
	if got := g.Late(); got != flow.MaxLate {
		t.Fatalf("Late() = %d, want %d", got, flow.MaxLate)
	}
	g.Stop(ctx)
}

// refuseStore is a Limiter of one rate limit that refuses its first refuse takes for an
// hour (taking nothing) and lets every later one start.
type refuseStore struct {
	rateOnly
	mu     sync.Mutex
	refuse int
	takes  int
}

func (s *refuseStore) LimitTake(context.Context, []source.Gate, string, time.Duration) (source.Take, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	if s.takes <= s.refuse {
		return source.Take{Wait: time.Hour, Which: 0}, nil
	}
	return source.Take{Which: -1}, nil
}

func TestDeliveriesRefusedByOneRateLimitAskAgainOneAtATime(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Unix(0, 0))
	g, resumed := limitGate(t, fake, &refuseStore{refuse: 5}, flow.Limit{N: 1, Per: time.Hour, Burst: 1})
	ctx := context.Background()
	for i := range 5 {
		if _, ok := g.Admit(ctx, &source.Delivery{ID: string(rune('a' + i))}); ok {
			t.Fatal("a refused delivery started")
		}
	}
	settled := func() {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); g.Due(); {
			if time.Now().After(deadline) {
				t.Fatal("the gate's due wakes did not run")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The hour passes: only the head of the five asks again, not all five at once.
	fake.Advance(time.Hour)
	head := <-resumed
	settled()
	if n := len(resumed); n != 0 {
		t.Fatalf("%d more deliveries resumed with the head, want none: only the head of a rate limit's line asks again", n)
	}
	// The head takes a start: the next of the line asks at once, without the clock moving.
	if _, ok := g.Admit(ctx, head); !ok {
		t.Fatal("the head did not start")
	}
	select {
	case next := <-resumed:
		if next == head {
			t.Fatal("the head was resumed again")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the line's next delivery did not ask once the head took a start")
	}
	settled()
	if n := len(resumed); n != 0 {
		t.Fatalf("%d more deliveries resumed, want one at a time", n)
	}
	g.Stop(ctx)
}

// lateStore is a Limiter of one rate limit whose takes take turns: a start reserved
// reserve ahead, then a refusal to wait refuse (taking nothing), and so on.
type lateStore struct {
	rateOnly
	mu              sync.Mutex
	takes           int
	reserve, refuse time.Duration
}

func (s *lateStore) LimitTake(context.Context, []source.Gate, string, time.Duration) (source.Take, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	if s.takes%2 == 1 {
		return source.Take{Wait: s.reserve, Which: 0, Reserved: true}, nil
	}
	return source.Take{Wait: s.refuse, Which: 0}, nil
}

func TestLateStartsCountAcrossARefusalSoADeliveryAlwaysLateStillStarts(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Unix(0, 0))
	// Every reserved start fires later than the slack, and each retake after one given up
	// is refused for a moment before the next reservation: were the count of starts given
	// up begun again at each refusal, the delivery would never start (and each round
	// would spend a start of its limit on nobody).
	store := &lateStore{reserve: 100 * time.Millisecond, refuse: 10 * time.Millisecond}
	g, resumed := limitGate(t, fake, store, flow.Limit{N: 10, Per: time.Second, Burst: 1})
	ctx := context.Background()
	d := &source.Delivery{ID: "1"}
	started := false
	for round := 0; round < 4*(flow.MaxLate+1); round++ {
		if _, ok := g.Admit(ctx, d); ok {
			started = true
			break
		}
		fake.Advance(100*time.Millisecond + flow.Slack(time.Second) + time.Millisecond)
		select {
		case <-resumed:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting delivery was not resumed")
		}
	}
	if !started {
		t.Fatalf("the delivery did not start after %d takes: a start given up for lateness must count toward MaxLate across the refusals between", store.takes)
	}
	if got := g.Late(); got != flow.MaxLate {
		t.Fatalf("Late() = %d, want %d", got, flow.MaxLate)
	}
	g.Stop(ctx)
}
