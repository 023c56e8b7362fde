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
