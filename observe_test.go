package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/settletest"
)

// A Publisher's hook adds headers to every message it writes without the call site
// naming them, and hears each write's result.
func TestPublishHookAddsHeadersAtEveryCallSiteAndHearsTheResult(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	var mu sync.Mutex
	var seen []string
	pub := settle.NewPublisher(h.Redis.Client, settle.WithPublishHook(func(_ context.Context, p *settle.Publishing) func(string, error) {
		p.Headers["traceparent"] = "00-" + p.Kind
		return func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, p.Kind+" "+p.Key+" "+id+" "+errString(err))
		}
	}))
	key := h.Redis.Key("hook.in")
	id, err := pub.Publish(context.Background(), key, "v", settle.Header("tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := h.Redis.Client.XRange(context.Background(), key, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("xrange: %v %v", msgs, err)
	}
	if msgs[0].Values["traceparent"] != "00-stream" || msgs[0].Values["tenant"] != "acme" {
		t.Fatalf("entry %v: want the hook's traceparent beside the caller's tenant", msgs[0].Values)
	}
	if _, err := pub.Publish(context.Background(), key, "v", settle.Header(settle.HeaderRetryCount, "9")); err == nil {
		t.Fatal("a reserved header was accepted")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "stream "+key+" "+id+" " || seen[1] == "stream "+key+"  " {
		t.Fatalf("hook heard %q: want the write's id, then the refusal's error", seen)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Config.Middleware wraps every mount's handler, outside the mount's own Use.
func TestAppMiddlewareWrapsEveryMountOutsideItsOwn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	trace := func(name string) settle.Middleware {
		return func(next settle.Handler) settle.Handler {
			return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
				mu.Lock()
				order = append(order, name+" "+m.Key)
				mu.Unlock()
				return next.Handle(ctx, m)
			})
		}
	}
	h := settletest.New(t, settletest.WithConfig(settle.Config{Middleware: []settle.Middleware{trace("app")}}))
	a, b := h.Redis.Key("mw.a"), h.Redis.Key("mw.b")
	ok := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })
	h.Mount(settle.Stream(h.Redis.Client, a, "g"), ok, settle.Use(trace("own")))
	h.Mount(settle.Stream(h.Redis.Client, b, "g"), ok)
	h.Start()
	h.Publish(a, "x")
	h.WaitSettled(1)
	h.Publish(b, "y")
	h.WaitSettled(2)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"app " + a, "own " + a, "app " + b}; !slices.Equal(order, want) {
		t.Fatalf("middleware ran %q, want %q", order, want)
	}
}

// Every settlement is logged at Debug or above, the ack included, and every line of one
// message carries the same msg_key across its copies (the first delivery's id, while
// msg_id changes) and the attributes its handler added.
func TestSettlementLinesShareTheMessageKeyAcrossCopiesAndCarryTheHandlersAttrs(t *testing.T) {
	t.Parallel()
	sink := logtest.New()
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: sink.Logger()}))
	in := h.Redis.Key("keys.in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		settle.AddLogAttrs(ctx, slog.String("refund", "r-42"))
		if m.Attempt < 3 {
			return settle.Retry(errors.New("busy"))
		}
		return nil
	}), settle.MaxAttempts(5), settle.DeadLetter(h.Redis.Key("keys.dlq")))
	h.Start()
	first := h.Publish(in, "x")
	h.WaitAction(settle.ActionAck, 1)
	h.Stop()

	lines := settlementLines(sink)
	if len(lines) != 3 {
		t.Fatalf("settlement lines %v, want 3 (retry, retry, sourcetest.Ack)", lines)
	}
	ids := map[string]bool{}
	for _, l := range lines {
		if l["msg_key"] != first || l["refund"] != "r-42" {
			t.Fatalf("line %v: want msg_key=%s (the first delivery's id) and refund=r-42", l, first)
		}
		ids[l["msg_id"]] = true
	}
	if len(ids) != 3 || lines[2]["action"] != "ack" {
		t.Fatalf("lines %v: want three deliveries with ids of their own, the last an ack", lines)
	}
}

// settlementLines returns the attributes of the records that report a settlement
// (those with an action and an attempt).
func settlementLines(s *logtest.Sink) []map[string]string {
	var out []map[string]string
	for _, r := range s.Records() {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		if attrs["action"] != "" && attrs["attempt"] != "" {
			out = append(out, attrs)
		}
	}
	return out
}

// The Event hook hears a durable delay set's sweep, with how many came back, and the
// copy coming back has its Debug line.
func TestEventHookHearsSweepsOfDueDelays(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var swept int
	sink := logtest.New()
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: sink.Logger(), Hooks: settle.Hooks{Event: func(_ context.Context, e settle.Event) {
		if e.Kind == settle.EventSweep && e.Transport == "stream" && e.Mount != "" {
			mu.Lock()
			swept += e.Count
			mu.Unlock()
		}
	}}}))
	in := h.Redis.Key("sweep.in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), retryOnceAfter(time.Minute), settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("sweep.delayed")}))
	h.Start()
	h.Publish(in, "x")
	h.WaitAction(settle.ActionPark, 1)
	h.Advance(time.Minute)
	h.WaitAction(settle.ActionAck, 1)
	mu.Lock()
	defer mu.Unlock()
	if swept != 1 {
		t.Fatalf("sweep events counted %d members, want 1", swept)
	}
	if n := sink.Count(slog.LevelDebug, "came due and were moved back"); n != 1 {
		t.Fatalf("%d Debug lines of the copy coming back, want 1", n)
	}
}

// An in-process delay's copy, written when due, has its Debug line (with the message's
// key), as every other settlement has.
func TestInProcessDelayedCopyWrittenBackIsLogged(t *testing.T) {
	t.Parallel()
	sink := logtest.New()
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: sink.Logger()}))
	in := h.Redis.Key("due.in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), retryOnceAfter(time.Minute), settle.DelayIn(delayed.InProcess{}))
	h.Start()
	first := h.Publish(in, "x")
	h.WaitAction(settle.ActionPark, 1)
	h.Advance(time.Minute)
	h.WaitAction(settle.ActionAck, 1)
	h.Stop()
	if n := sink.Count(slog.LevelDebug, "delayed copy written back"); n != 1 {
		t.Fatalf("%d Debug lines of the copy written back, want 1", n)
	}
	if v, ok := sink.Attr("delayed copy written back", "msg_key"); !ok || v.String() != first {
		t.Fatalf("the line's msg_key is %v, want %s", v, first)
	}
}

// retryOnceAfter is a handler that asks for a retry after d on the first delivery and
// acks the next.
func retryOnceAfter(d time.Duration) settle.Handler {
	return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.RetryAfter(d, nil)
		}
		return nil
	})
}

// An entry left pending to this consumer's name by an earlier process, re-read when it
// starts again, is reported as a redelivery; an entry read the first time is not.
func TestReReadPendingEntryIsReportedAsARedelivery(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	ctx, rdb := context.Background(), h.Redis.Client
	in := h.Redis.Key("reread.in")
	if err := rdb.XGroupCreateMkStream(ctx, in, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	left := h.Publish(in, "left")
	// The earlier process read it and died before settling it.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{in, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := h.Publish(in, "fresh")
	h.Mount(settle.Stream(rdb, in, "g", settle.Consumer("c")), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	h.Start()
	evs := h.WaitAction(settle.ActionAck, 2)
	h.Stop()
	for _, e := range evs {
		if want := e.ID == left; e.Redelivery != want {
			t.Fatalf("%s (left %s, fresh %s): Redelivery %v, want %v", e.ID, left, fresh, e.Redelivery, want)
		}
	}
}
