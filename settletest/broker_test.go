package settletest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

type seen struct {
	attempt int
	at      time.Time
}

// brokerBundle is a harness with a broker's topic mounted.
type brokerBundle struct {
	broker *settletest.Broker
	h      *settletest.Harness
	mem    *settletest.Topic
	mu     sync.Mutex
	got    []seen
}

func setupBroker(t *testing.T, fn func(m *settle.Message) error, opts ...settle.MountOption) *brokerBundle {
	t.Helper()
	return setupOn(t, settletest.NewBroker(), fn, opts...)
}

func setupOn(t *testing.T, broker *settletest.Broker, fn func(m *settle.Message) error, opts ...settle.MountOption) *brokerBundle {
	t.Helper()
	b := &brokerBundle{broker: broker, h: settletest.New(t), mem: broker.Topic("payments")}
	b.h.Mount(b.mem, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		b.mu.Lock()
		b.got = append(b.got, seen{attempt: m.Attempt, at: b.h.Clock.Now()})
		b.mu.Unlock()
		return fn(m)
	}), opts...)
	b.h.Start()
	return b
}

func (b *brokerBundle) deliveries() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

func TestBroker(t *testing.T) {
	t.Parallel()

	t.Run("AckCompletes", func(t *testing.T) {
		t.Parallel()
		b := setupBroker(t, func(*settle.Message) error { return nil })
		b.mem.Publish([]byte("p"), nil)
		evs := b.h.WaitSettled(1)
		if evs[0].Action != settle.ActionAck || b.mem.Len() != 0 {
			t.Fatalf("events %+v, %d left; want one ack and nothing left", evs, b.mem.Len())
		}
	})

	t.Run("RetryRedeliversWithAttemptPlusOne", func(t *testing.T) {
		t.Parallel()
		b := setupBroker(t, func(m *settle.Message) error {
			if m.Attempt < 3 {
				return settle.Retry(errors.New("unavailable"))
			}
			return nil
		})
		b.mem.Publish([]byte("p"), nil)
		b.h.WaitAction(settle.ActionAck, 1)
		var attempts []int
		for _, d := range b.deliveries() {
			attempts = append(attempts, d.attempt)
		}
		if !slices.Equal(attempts, []int{1, 2, 3}) {
			t.Fatalf("attempts = %v, want [1 2 3]", attempts)
		}
	})

	t.Run("RetryAfterRedeliversExactlyAfterTheDelay", func(t *testing.T) {
		t.Parallel()
		b := setupBroker(t, func(m *settle.Message) error {
			if m.Attempt == 1 {
				return settle.RetryAfter(time.Second, errors.New("busy"))
			}
			return nil
		})
		start := b.h.Clock.Now()
		b.mem.Publish([]byte("p"), nil)
		b.h.WaitAction(settle.ActionPark, 1)
		b.h.Advance(time.Second - time.Millisecond)
		b.h.Advance(time.Millisecond)
		b.h.WaitAction(settle.ActionAck, 1)
		ds := b.deliveries()
		if len(ds) != 2 || ds[1].attempt != 2 || !ds[1].at.Equal(start.Add(time.Second)) {
			t.Fatalf("deliveries = %+v, want attempt 2 at exactly start + 1s (%v)", ds, start.Add(time.Second))
		}
	})

	t.Run("DeadLettersArePublishedToTheirTopic", func(t *testing.T) {
		t.Parallel()
		b := setupBroker(t, func(*settle.Message) error { return settle.Retry(errors.New("declined")) },
			settle.MaxAttempts(2), settle.DeadLetter("payments.dead"))
		b.mem.Publish([]byte("p"), map[string]string{"order": "7"})
		b.h.WaitAction(settle.ActionDeadLetter, 1)
		dead := b.broker.Topic("payments.dead").Messages()
		if len(dead) != 1 || string(dead[0].Payload) != "p" ||
			dead[0].Headers["order"] != "7" || dead[0].Headers[settle.HeaderRetryCount] != "2" || !strings.Contains(dead[0].Headers[settle.HeaderDeadError], "declined") {
			t.Fatalf("dead letters = %+v", dead)
		}
	})

	t.Run("ParkedMessagesOutliveTheApp", func(t *testing.T) {
		t.Parallel()
		mem := settletest.NewBroker().Topic("payments")
		clk := settletest.NewClock(time.UnixMilli(1_000_000))
		busy := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if m.Attempt == 1 {
				return settle.RetryAfter(time.Minute, nil)
			}
			return nil
		})
		h1 := settletest.New(t, settletest.WithClock(clk))
		h1.Mount(mem, busy)
		h1.Start()
		mem.Publish([]byte("p"), nil)
		h1.WaitAction(settle.ActionPark, 1)
		h1.Stop()
		if mem.Parked() != 1 {
			t.Fatalf("parked = %d after the App stopped, want 1", mem.Parked())
		}
		h2 := settletest.New(t, settletest.WithClock(clk))
		h2.Mount(mem, busy)
		h2.Start()
		h2.Advance(time.Minute)
		evs := h2.WaitAction(settle.ActionAck, 1)
		if evs[0].Attempt != 2 {
			t.Fatalf("App 2 settled %+v, want attempt 2", evs[0])
		}
	})
}

func TestHarnessLiveModeRunsOnTheWallClock(t *testing.T) {
	t.Parallel()
	h := settletest.New(t, settletest.Live())
	if h.Clock != nil {
		t.Fatalf("live harness has a fake clock")
	}
	in := h.Redis.Key("in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g", settle.Block(50*time.Millisecond)), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.RetryAfter(20*time.Millisecond, nil)
		}
		return nil
	}))
	h.Start()
	h.Publish(in, 1)
	evs := h.WaitAction(settle.ActionAck, 1)
	if last := evs[len(evs)-1]; last.Attempt != 2 {
		t.Fatalf("ack of attempt %d, want 2 (the in-process delay passed on the wall clock)", last.Attempt)
	}
}

func TestBrokerWithoutDelaysPublishesACopyBackToTheTopicWhenDue(t *testing.T) {
	t.Parallel()
	b := setupOn(t, settletest.NewBroker(settletest.WithoutDelays()), func(m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.RetryAfter(time.Second, errors.New("busy"))
		}
		return nil
	})
	start := b.h.Clock.Now()
	first := b.mem.Publish([]byte("p"), nil)
	b.h.WaitAction(settle.ActionPark, 1) // kept by the App, not the broker
	if n := b.mem.Parked(); n != 0 {
		t.Fatalf("the broker parked %d, want 0: it cannot delay", n)
	}
	b.h.Advance(time.Second)
	// The copy's own event may be reported after the copy was read and acked: wait for both.
	evs := b.h.WaitFor("the copy and its ack", func(evs []settle.Settled) bool {
		var c, a bool
		for _, e := range evs {
			c = c || e.Action == settle.ActionCopy
			a = a || e.Action == settle.ActionAck
		}
		return c && a
	})
	var copied, acked settle.Settled
	for _, e := range evs {
		switch e.Action {
		case settle.ActionCopy:
			copied = e
		case settle.ActionAck:
			acked = e
		}
	}
	if copied.ID != first || acked.ID == first || acked.Attempt != 2 {
		t.Fatalf("copy of %q then ack of %q at attempt %d; want the original copied back and the copy acked at attempt 2", copied.ID, acked.ID, acked.Attempt)
	}
	if ds := b.deliveries(); len(ds) != 2 || !ds[1].at.Equal(start.Add(time.Second)) {
		t.Fatalf("deliveries %+v, want the copy exactly 1s after the first", ds)
	}
}

func TestBrokerDeadLettersAndRepliesAreReadByOtherMounts(t *testing.T) {
	t.Parallel()
	broker := settletest.NewBroker()
	h := settletest.New(t)
	h.Mount(broker.Topic("payments.requested"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if string(m.Payload) == "declined" {
			return errors.New("declined")
		}
		return m.Reply(append([]byte("paid "), m.Payload...))
	}), settle.WithCodec(settle.Raw), settle.MaxAttempts(1), settle.DeadLetter("payments.dead"), settle.ReplyTo("payments.paid"))
	var mu sync.Mutex
	got := map[string][]string{}
	record := func(m *settle.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.Key] = append(got[m.Key], string(m.Payload))
		return nil
	}
	for _, topic := range []string{"payments.dead", "payments.paid"} {
		h.Mount(broker.Topic(topic), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error { return record(m) }))
	}
	h.Start()
	broker.Topic("payments.requested").Publish([]byte("order 1"), nil)
	broker.Topic("payments.requested").Publish([]byte("declined"), nil)
	h.WaitFor("both read on", func(evs []settle.Settled) bool {
		n := 0
		for _, e := range evs {
			if e.Action == settle.ActionAck {
				n++
			}
		}
		return n == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got["payments.paid"]) != "[paid order 1]" || fmt.Sprint(got["payments.dead"]) != "[declined]" {
		t.Fatalf("read %v, want the reply on payments.paid and the dead letter on payments.dead", got)
	}
}
