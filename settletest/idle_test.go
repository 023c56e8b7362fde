package settletest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/settletest"
)

// idleSource is one way to mount a source that retries after a delay, for the Idle
// tests: on the harness's Redis (miniredis, or SETTLE_REDIS_URL's server) or a broker.
type idleSource struct {
	name  string
	mount func(t *testing.T, h *settletest.Harness, hd settle.Handler) (publish func())
}

func idleSources() []idleSource {
	stream := func(h *settletest.Harness, hd settle.Handler, opts ...settle.MountOption) func() {
		in := h.Redis.Key("in")
		h.Mount(settle.Stream(h.Redis.Client, in, "workers"), hd, opts...)
		return func() { h.Publish(in, "refund-1") }
	}
	topic := func(b *settletest.Broker) func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
		return func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
			mem := b.Topic("payments")
			h.Mount(mem, hd)
			return func() { mem.Publish([]byte("charge-7"), nil) }
		}
	}
	return []idleSource{
		{name: "StreamDurableZset", mount: func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
			return stream(h, hd, settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("delayed")}))
		}},
		{name: "StreamInProcess", mount: func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
			return stream(h, hd, settle.DelayIn(delayed.InProcess{}))
		}},
		{name: "ReliableListDurableZset", mount: func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
			in := h.Redis.Key("jobs")
			h.Mount(settle.ReliableList(h.Redis.Client, in), hd,
				settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("delayed")}))
			return func() {
				if err := h.Redis.Client.LPush(context.Background(), in, "job-1").Err(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "PubSubInProcess", mount: func(t *testing.T, h *settletest.Harness, hd settle.Handler) func() {
			ch := h.Redis.Key("events")
			h.Mount(settle.PubSub(h.Redis.Client, ch), hd, settle.DelayIn(delayed.InProcess{}))
			return func() {
				h.Idle() // the mount has read once: it is subscribed
				if _, err := settle.NewPublisher(h.Redis.Client).PublishChannel(context.Background(), ch, "event-1"); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "Broker", mount: topic(settletest.NewBroker())},
		{name: "BrokerWithoutDelays", mount: topic(settletest.NewBroker(settletest.WithoutDelays()))},
	}
}

// counting is a handler that asks a 30 s RetryAfter on the first attempt and counts
// its deliveries.
type counting struct{ n atomic.Int64 }

func (c *counting) Handle(_ context.Context, m *settle.Message) error {
	c.n.Add(1)
	if m.Attempt == 1 {
		return settle.RetryAfter(30*time.Second, fmt.Errorf("provider busy"))
	}
	return nil
}

// Advance(29s) then Idle proves the 30 s delay has not come back; Advance(1s) then Idle
// proves it came back exactly once and was settled. Without the Idle after Advance(1s)
// the redelivery is still on its way (asynchronous) and the count is 1.
func TestIdleReturnsOnlyOnceADelayDueAtNowHasBeenHandled(t *testing.T) {
	t.Parallel()
	for _, src := range idleSources() {
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			h := settletest.New(t)
			c := &counting{}
			publish := src.mount(t, h, c)
			h.Start()
			publish()
			h.WaitAction(settle.ActionPark, 1)

			h.Advance(29 * time.Second)
			h.Idle()
			if got := c.n.Load(); got != 1 {
				t.Fatalf("after 29 s: %d deliveries, want 1 (the 30 s delay is not due)", got)
			}
			h.Advance(time.Second)
			h.Idle()
			if got := c.n.Load(); got != 2 {
				t.Fatalf("after 30 s and Idle: %d deliveries, want 2 (the delay came due at now)", got)
			}
			// Its settlement is reported too (events of one message may come out of order:
			// an in-process delay's copy is reported once written, maybe after the ack).
			evs := h.Events()
			if !slices.ContainsFunc(evs, func(e settle.Settled) bool { return e.Action == settle.ActionAck && e.Attempt == 2 }) {
				t.Fatalf("after Idle: events %+v, want the redelivery's ack among them", evs)
			}
			h.Idle() // and nothing more comes
			if got := c.n.Load(); got != 2 {
				t.Fatalf("after a second Idle: %d deliveries, want 2", got)
			}
		})
	}
}

// Idle waits for a handler still running and for its settlement to be reported.
func TestIdleWaitsForARunningHandlerAndItsSettlement(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	in := h.Redis.Key("in")
	var running sync.WaitGroup
	running.Add(1)
	release := make(chan struct{})
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		running.Done()
		<-release
		return nil
	}))
	h.Start()
	h.Publish(in, "refund-1")
	running.Wait()
	time.AfterFunc(50*time.Millisecond, func() { close(release) })
	h.Idle()
	if evs := h.Events(); len(evs) != 1 || evs[0].Action != settle.ActionAck {
		t.Fatalf("after Idle: events %+v, want the ack", evs)
	}
}

// Idle returns on a paused mount: it reads nothing until resumed.
func TestIdleReturnsOnAPausedMount(t *testing.T) {
	t.Parallel()
	mem := settletest.NewBroker().Topic("payments")
	mem.Pause()
	h := settletest.New(t)
	c := &counting{}
	h.Mount(mem, c)
	h.Start()
	mem.Publish([]byte("charge-7"), nil)
	h.Idle()
	if got := c.n.Load(); got != 0 {
		t.Fatalf("paused: %d deliveries, want 0", got)
	}
}

// fatalRecorder records the harness's Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	mu    sync.Mutex
	fatal string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
}

// Idle fails the test after the wait timeout, naming the mount that is still busy.
func TestIdleFailsNamingAMountThatStaysBusy(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	h := settletest.New(rec, settletest.WaitTimeout(2*time.Second))
	in := h.Redis.Key("in")
	release := make(chan struct{})
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		<-release
		return nil
	}), settle.Name("refunds"))
	h.Start()
	t.Cleanup(func() { close(release) })
	h.Publish(in, "refund-1")
	h.Idle()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !strings.Contains(rec.fatal, "mount refunds holds 1 deliveries") {
		t.Fatalf("Idle failed with %q, want it to name the busy mount", rec.fatal)
	}
}
