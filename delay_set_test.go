package settle_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
	"github.com/settlekit/settle/settletest"
)

// The transports that carry one value per message (lists and channels) and keep their
// RetryAfter delays in a delayed.DurableZset.
var valueKinds = []string{"List", "ReliableList", "PubSub", "PubSubPattern"}

// valueMount is one list or channel mount with a durable delay set, on a harness.
type valueMount struct {
	h    *settletest.Harness
	kind string
	sink *logtest.Sink
	in   string // the list, or the channel messages are published to
	set  string
	dlq  string
}

func newValueMount(t *testing.T, kind string, opts ...settletest.Option) *valueMount {
	t.Helper()
	sink := logtest.New(sourcetest.Subscribed)
	h := settletest.New(t, append(opts, settletest.WithConfig(settle.Config{Logger: sink.Logger()}))...)
	return &valueMount{h: h, kind: kind, sink: sink, in: h.Redis.Key("ev.in"), set: h.Redis.Key("delayed"), dlq: h.Redis.Key("dlq")}
}

func (v *valueMount) channel() bool { return strings.HasPrefix(v.kind, "PubSub") }

// processing is the ReliableList's processing list.
func (v *valueMount) processing() string { return settle.ProcessingList(v.in, "c") }

func (v *valueMount) mount(r *recorder, opts ...settle.MountOption) {
	rdb := v.h.Redis.Client
	r.clock = v.h.Clock.Now
	opts = append([]settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: v.set})}, opts...)
	var src settle.Source
	switch v.kind {
	case "List":
		src = settle.List(rdb, v.in)
	case "ReliableList":
		src = settle.ReliableList(rdb, v.in, settle.Consumer("c"))
	case "PubSub":
		src = settle.PubSub(rdb, v.in)
	case "PubSubPattern":
		src = settle.PubSubPattern(rdb, v.h.Redis.Key("ev.*"), settle.OutRetry(v.h.Redis.Key("ev.retry")))
	}
	v.h.Mount(src, r, opts...)
}

// start starts the App and, on a channel, waits until it has subscribed.
func (v *valueMount) start(t *testing.T) {
	t.Helper()
	v.h.Start()
	if v.channel() {
		sourcetest.WaitSubscribed(t, v.sink)
	}
}

func (v *valueMount) publish(t *testing.T, payload any, headers map[string]string) {
	t.Helper()
	pub, ctx := settle.NewPublisher(v.h.Redis.Client), context.Background()
	if v.channel() {
		if n, err := pub.PublishChannel(ctx, v.in, payload, settle.Headers(headers)); err != nil || n != 1 {
			t.Fatalf("publish reached %d subscribers (%v), want 1", n, err)
		}
		return
	}
	if err := pub.PublishList(ctx, v.in, payload, settle.Headers(headers)); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// parkedHeaders returns the headers of the copies waiting in the delay set.
func (v *valueMount) parkedHeaders(t *testing.T) []map[string]string {
	t.Helper()
	members, err := v.h.Redis.Client.ZRange(context.Background(), v.set, 0, -1).Result()
	if err != nil {
		t.Fatalf("zrange: %v", err)
	}
	var out []map[string]string
	for _, m := range members {
		_, value, err := wire.ParseValueDelayMember(m)
		if err != nil {
			t.Fatalf("member %q: %v", m, err)
		}
		_, headers, ok, err := wire.FromEnvelope(value)
		if err != nil || !ok {
			t.Fatalf("member %q does not hold an envelope (%v)", m, err)
		}
		out = append(out, headers)
	}
	return out
}

func attemptsSeen(r *recorder) []int {
	var out []int
	for _, d := range r.deliveries() {
		out = append(out, d.attempt)
	}
	return out
}

// Seed 002's test story on lists and channels: a 30 s backoff passes instantly with
// Advance, and the copy comes back no earlier than asked.
func TestDurableZsetOnValueTransportsBackoffPassesInstantlyWithAdvance(t *testing.T) {
	t.Parallel()
	for _, kind := range valueKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			v := newValueMount(t, kind)
			r := &recorder{fn: busyOnce}
			v.mount(r, settle.MaxAttempts(5))
			v.start(t)
			start := v.h.Clock.Now()
			v.publish(t, "refund-1", map[string]string{"tenant": "a"})
			evs := v.h.WaitAction(settle.ActionPark, 1)
			if e := evs[len(evs)-1]; e.Err != nil || e.Delay != backoff {
				t.Fatalf("park event = %+v, want applied with delay %s", e, backoff)
			}
			// The clock moves in three steps: a delivery before the last would be early.
			v.h.Advance(10 * time.Second)
			v.h.Advance(10 * time.Second)
			v.h.Advance(10 * time.Second)
			v.h.WaitAction(settle.ActionAck, 1)
			ds := r.deliveries()
			if len(ds) != 2 || ds[1].attempt != 2 || ds[1].headers["tenant"] != "a" {
				t.Fatalf("deliveries = %+v, want attempts 1 then 2 with the headers kept", ds)
			}
			if got := ds[1].at.Sub(start); got < backoff {
				t.Fatalf("redelivered %s after the first delivery on the clock, want >= %s", got, backoff)
			}
			if n, _ := v.h.Redis.Client.Exists(context.Background(), v.set).Result(); n != 0 {
				t.Fatal("the delay set still exists after its only member came back")
			}
		})
	}
}

func TestDurableZsetOnValueTransportsCopyCarriesCountToTheDeadLetter(t *testing.T) {
	t.Parallel()
	for _, kind := range valueKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			v := newValueMount(t, kind)
			ctx := context.Background()
			var dead *redis.PubSub
			if v.channel() {
				dead = v.h.Redis.Client.Subscribe(ctx, v.dlq)
				t.Cleanup(func() { _ = dead.Close() })
				if _, err := dead.Receive(ctx); err != nil {
					t.Fatal(err)
				}
			}
			r := &recorder{fn: func(*settle.Message) error { return settle.RetryAfter(time.Second, errors.New("busy")) }}
			v.mount(r, settle.MaxAttempts(3), settle.DeadLetter(v.dlq))
			v.start(t)
			v.publish(t, "refund-1", map[string]string{"tenant": "a"})
			for k := 1; k <= 2; k++ {
				v.h.WaitAction(settle.ActionPark, k)
				parked := v.parkedHeaders(t)
				if len(parked) != 1 || parked[0][settle.HeaderRetryCount] != string(rune('0'+k)) || parked[0]["tenant"] != "a" {
					t.Fatalf("after park %d the set holds %v; want one copy with retry count %d and the headers kept", k, parked, k)
				}
				v.h.Advance(time.Second)
			}
			v.h.WaitAction(settle.ActionDeadLetter, 1)
			if got := attemptsSeen(r); !slices.Equal(got, []int{1, 2, 3}) {
				t.Fatalf("attempts = %v, want [1 2 3]", got)
			}
			var value string
			if dead != nil {
				rctx, cancel := context.WithTimeout(ctx, sourcetest.WaitTimeout)
				defer cancel()
				m, err := dead.ReceiveMessage(rctx)
				if err != nil {
					t.Fatalf("no dead letter on channel %s: %v", v.dlq, err)
				}
				value = m.Payload
			} else {
				vals, err := v.h.Redis.Client.LRange(ctx, v.dlq, 0, -1).Result()
				if err != nil || len(vals) != 1 {
					t.Fatalf("dead-letter list = %v, %v; want one item", vals, err)
				}
				value = vals[0]
			}
			d := sourcetest.ReadDeadEnvelope(t, value)
			if d.Headers[settle.HeaderRetryCount] != "3" || d.Headers["tenant"] != "a" || !strings.HasSuffix(d.Headers[settle.HeaderDeadError], "busy") {
				t.Fatalf("dead letter headers = %v; want retry count 3, the message's own and the last error", d.Headers)
			}
		})
	}
}

func TestDurableZsetOnValueTransportsParkedCopySurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range valueKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := settletest.Redis(t)
			clk := settletest.NewClock(time.Now().Truncate(time.Millisecond))
			if srv.Mini != nil {
				clk.AttachMiniredis(srv.Mini)
			}

			// App 1 parks the delay and stops.
			v1 := newValueMount(t, kind, settletest.WithRedis(srv), settletest.WithClock(clk))
			r1 := &recorder{fn: busyOnce}
			v1.mount(r1, settle.MaxAttempts(5))
			v1.start(t)
			v1.publish(t, "refund-1", nil)
			v1.h.WaitAction(settle.ActionPark, 1)
			v1.h.Stop()
			if n, err := srv.Client.ZCard(context.Background(), v1.set).Result(); err != nil || n != 1 {
				t.Fatalf("delay set holds %d, %v after App 1 stopped; want 1", n, err)
			}

			// App 2 on the same Redis delivers it when due.
			v2 := newValueMount(t, kind, settletest.WithRedis(srv), settletest.WithClock(clk))
			r2 := &recorder{fn: busyOnce}
			v2.mount(r2, settle.MaxAttempts(5))
			v2.start(t)
			v2.h.Advance(backoff)
			v2.h.WaitAction(settle.ActionAck, 1)
			if got := attemptsSeen(r2); !slices.Equal(got, []int{2}) {
				t.Fatalf("App 2 attempts = %v, want the parked copy at attempt 2", got)
			}
		})
	}
}

func TestDurableZsetOnReliableListParkIsOneStep(t *testing.T) {
	t.Parallel()

	t.Run("ItemLeavesProcessingListAsCopyEntersSet", func(t *testing.T) {
		t.Parallel()
		v := newValueMount(t, "ReliableList")
		r := &recorder{fn: busyOnce}
		v.mount(r)
		v.start(t)
		v.publish(t, "refund-1", nil)
		v.h.WaitAction(settle.ActionPark, 1)
		ctx := context.Background()
		if n, err := v.h.Redis.Client.LLen(ctx, v.processing()).Result(); err != nil || n != 0 {
			t.Fatalf("processing list holds %d (%v) after the park, want 0", n, err)
		}
		if n, err := v.h.Redis.Client.ZCard(ctx, v.set).Result(); err != nil || n != 1 {
			t.Fatalf("delay set holds %d (%v) after the park, want 1", n, err)
		}
	})

	t.Run("ItemRecoveredElsewhereIsNotParked", func(t *testing.T) {
		t.Parallel()
		v := newValueMount(t, "ReliableList")
		rdb := v.h.Redis.Client
		r := &recorder{fn: func(m *settle.Message) error {
			// Another consumer recovers the item while the handler runs.
			if _, err := rdb.Del(context.Background(), v.processing()).Result(); err != nil {
				return settle.Drop(err)
			}
			return settle.RetryAfter(backoff, errors.New("busy"))
		}}
		v.mount(r)
		v.start(t)
		v.publish(t, "refund-1", nil)
		evs := v.h.WaitAction(settle.ActionPark, 1)
		if e := evs[0]; e.Err == nil || !strings.Contains(e.Err.Error(), "no longer in the processing list") {
			t.Fatalf("park event = %+v, want it refused: the item was gone", e)
		}
		if n, _ := rdb.Exists(context.Background(), v.set).Result(); n != 0 {
			t.Fatal("a copy of an item another consumer recovered was parked: it would come back twice")
		}
	})
}

// A read blocks no longer than until the next parked copy is due, on the real clock: a
// sweep only at the end of each 3 s block would bring the copy back 3 s late.
func TestDurableZsetOnValueTransportsReadBlocksOnlyUntilDue(t *testing.T) {
	t.Parallel()
	for _, kind := range valueKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sink := logtest.New(sourcetest.Subscribed)
			h := settletest.New(t, settletest.Live(), settletest.WithConfig(settle.Config{Logger: sink.Logger()}))
			v := &valueMount{h: h, kind: kind, sink: sink, in: h.Redis.Key("ev.in"), set: h.Redis.Key("delayed")}
			r := &recorder{clock: time.Now, fn: func(m *settle.Message) error {
				if m.Attempt == 1 {
					return settle.RetryAfter(200*time.Millisecond, nil)
				}
				return nil
			}}
			rdb, block := h.Redis.Client, settle.Block(3*time.Second)
			var src settle.Source
			switch kind {
			case "List":
				src = settle.List(rdb, v.in, block)
			case "ReliableList":
				src = settle.ReliableList(rdb, v.in, block)
			case "PubSub":
				src = settle.PubSub(rdb, v.in, block)
			case "PubSubPattern":
				src = settle.PubSubPattern(rdb, h.Redis.Key("ev.*"), block, settle.OutRetry(h.Redis.Key("ev.retry")))
			}
			h.Mount(src, r, settle.DelayIn(delayed.DurableZset{Key: v.set}))
			v.start(t)
			v.publish(t, "refund-1", nil)
			h.WaitAction(settle.ActionAck, 1)
			ds := r.deliveries()
			// The due time is on Redis's clock in whole milliseconds, the deliveries' on
			// this host's: a redelivery may look up to a few ms early (199.93ms was seen).
			if got := ds[1].at.Sub(ds[0].at); got < 195*time.Millisecond || got > 1500*time.Millisecond {
				t.Fatalf("redelivered %s after the first delivery, want soon after the 200ms delay, long before the 3s block ends", got)
			}
		})
	}
}

func TestDurableZsetOnValueTransportsValidate(t *testing.T) {
	t.Parallel()
	srv := settletest.Redis(t)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	noop := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })
	dz := func(key string) settle.MountOption { return settle.DelayIn(delayed.DurableZset{Key: key}) }

	tests := []struct {
		name    string
		src     settle.Source
		opts    []settle.MountOption
		wantErr string
	}{
		{name: "ListAccepted", src: settle.List(srv.Client, "jobs"), opts: []settle.MountOption{dz("jobs.delayed")}},
		{name: "ReliableListAccepted", src: settle.ReliableList(srv.Client, "jobs"), opts: []settle.MountOption{dz("jobs.delayed")}},
		{name: "PubSubAccepted", src: settle.PubSub(srv.Client, "events"), opts: []settle.MountOption{dz("events.delayed")}},
		{name: "PatternAccepted", src: settle.PubSubPattern(srv.Client, "ev.*", settle.OutRetry("ev.retry")), opts: []settle.MountOption{dz("ev.delayed")}},
		{name: "SetIsTheListRefused", src: settle.List(srv.Client, "jobs"), opts: []settle.MountOption{dz("jobs")}, wantErr: "the delay set's key is the list's"},
		{name: "SetIsTheDeadLetterListRefused", src: settle.ReliableList(srv.Client, "jobs"), opts: []settle.MountOption{dz("jobs.dlq"), settle.DeadLetter("jobs.dlq")}, wantErr: "the delay set's key is the dead-letter list's"},
		{name: "ClusterCrossSlotListRefused", src: settle.List(cluster, "jobs"), opts: []settle.MountOption{dz("jobs.delayed")}, wantErr: "must share a slot"},
		{name: "ClusterCrossSlotReliableListRefused", src: settle.ReliableList(cluster, "{jobs}:in"), opts: []settle.MountOption{dz("jobs.delayed")}, wantErr: "must share a slot"},
		{name: "ClusterHashTaggedListAccepted", src: settle.List(cluster, "{jobs}:in"), opts: []settle.MountOption{dz("{jobs}:delayed")}},
		{name: "ClusterHashTaggedReliableListAccepted", src: settle.ReliableList(cluster, "{jobs}:in"), opts: []settle.MountOption{dz("{jobs}:delayed"), settle.DeadLetter("{jobs}:dlq")}},
		// A channel is not a key: the set alone is what each script touches.
		{name: "ClusterChannelAnySlotAccepted", src: settle.PubSub(cluster, "events"), opts: []settle.MountOption{dz("{other}:delayed")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(tt.src, noop, tt.opts...)
			err = app.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
			var ce *settle.ConfigError
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want *ConfigError", err)
			}
		})
	}
}

// TestClusterDurableZsetOnValueTransportsRoundTrip proves durable delays on lists and
// channels work on a Redis Cluster: the park and sweep scripts run on the slot's master
// (a channel's sweep publishes from there), a sub-second blocking read goes through the
// cluster client, and the copy comes back as attempt 2 with nothing left parked.
func TestClusterDurableZsetOnValueTransportsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range valueKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := redistest.Cluster(t)
			in, set, block := c.Key("ev.in"), c.Key("delayed"), settle.Block(3*time.Second)
			var src settle.Source
			switch kind {
			case "List":
				src = settle.List(c.Client, in, block)
			case "ReliableList":
				src = settle.ReliableList(c.Client, in, block, settle.Consumer("c"))
			case "PubSub":
				src = settle.PubSub(c.Client, in, block)
			case "PubSubPattern":
				src = settle.PubSubPattern(c.Client, c.Key("ev.*"), block, settle.OutRetry(c.Key("ev.retry")))
			}
			sink := logtest.New(sourcetest.Subscribed)
			s := &sourcetest.Subject{Config: settle.Config{Logger: sink.Logger()}, Source: src}
			attempts := make(chan int, 4)
			run := sourcetest.Start(t, s, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				attempts <- m.Attempt
				if m.Attempt == 1 {
					return settle.RetryAfter(100*time.Millisecond, errors.New("not yet"))
				}
				return nil
			}), settle.DelayIn(delayed.DurableZset{Key: set}), settle.MaxAttempts(3))

			ctx, pub := context.Background(), settle.NewPublisher(c.Client)
			if strings.HasPrefix(kind, "PubSub") {
				sourcetest.WaitSubscribed(t, sink)
				// On a cluster PUBLISH counts only the receiving node's subscribers.
				if _, err := pub.PublishChannel(ctx, in, "later"); err != nil {
					t.Fatalf("publish: %v", err)
				}
			} else if err := pub.PublishList(ctx, in, "later"); err != nil {
				t.Fatalf("publish: %v", err)
			}
			events := run.WaitFor(t, "the delayed copy acked", 0, func(evs []settle.Settled) bool {
				return slices.ContainsFunc(evs, func(e settle.Settled) bool { return e.Action == settle.ActionAck && e.Err == nil })
			})
			run.Stop(t)
			if len(events) != 2 || events[0].Action != settle.ActionPark || events[0].Err != nil {
				t.Fatalf("settlements %+v, want a park then an ack", events)
			}
			if got := []int{<-attempts, <-attempts}; got[0] != 1 || got[1] != 2 {
				t.Fatalf("attempts %v, want [1 2]", got)
			}
			if n := c.Client.Exists(ctx, set).Val(); n != 0 {
				t.Fatalf("the delay set %s still exists, want the copy swept", set)
			}
			if kind == "ReliableList" {
				if n := c.Client.LLen(ctx, settle.ProcessingList(in, "c")).Val(); n != 0 {
					t.Fatalf("the processing list holds %d, want 0", n)
				}
			}
		})
	}
}

// An ack of a ReliableList item that another consumer recovered in the meantime (this
// consumer's heartbeat lapsed) finds the item gone: the message will be delivered again,
// so its settlement is reported failed; the items acked in the same batch are reported
// applied.
func TestReliableListAckOfAnItemRecoveredElsewhereIsReportedFailedAlone(t *testing.T) {
	t.Parallel()
	v := newValueMount(t, "ReliableList")
	rdb := v.h.Redis.Client
	var both sync.WaitGroup
	both.Add(2)
	r := &recorder{fn: func(m *settle.Message) error {
		if strings.Contains(string(m.Payload), "gone") {
			// Another consumer recovers this item while the handler runs.
			items, err := rdb.LRange(context.Background(), v.processing(), 0, -1).Result()
			if err != nil {
				return settle.Drop(err)
			}
			for _, it := range items {
				if strings.Contains(it, "gone") {
					if err := rdb.LRem(context.Background(), v.processing(), 1, it).Err(); err != nil {
						return settle.Drop(err)
					}
				}
			}
		}
		// Both handlers return together, so their acks share a batch when they can.
		both.Done()
		both.Wait()
		return nil
	}}
	v.mount(r, settle.Concurrency(2))
	v.start(t)
	v.publish(t, "refund-gone", nil)
	v.publish(t, "refund-kept", nil)
	evs := v.h.WaitAction(settle.ActionAck, 2)
	if len(r.deliveries()) != 2 {
		t.Fatalf("%d deliveries, want 2", len(r.deliveries()))
	}
	var failed, applied int
	for _, e := range evs {
		if e.Action != settle.ActionAck {
			continue
		}
		if e.Err != nil {
			if !strings.Contains(e.Err.Error(), "no longer in the processing list") {
				t.Fatalf("ack failed with %v, want the item-gone error", e.Err)
			}
			failed++
		} else {
			applied++
		}
	}
	if failed != 1 || applied != 1 {
		t.Fatalf("acks: %d failed, %d applied; want the recovered item's failed and the other applied", failed, applied)
	}
}
