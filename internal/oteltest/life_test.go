package oteltest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/settleotel"
	"github.com/settlekit/settle/settletest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A dead letter replayed from settle/admin comes back as a delivery linked to the dead
// letter's span, so the replay continues the message's chain.
func TestReplayFromAdminLinksBackToTheDeadLetter(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	in, dlq := h.Redis.Key("in"), h.Redis.Key("dlq")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Headers[admin.HeaderReplayedFrom] != "" {
			return nil
		}
		return settle.Retry(errors.New("down"))
	}), settle.MaxAttempts(2), settle.DeadLetter(dlq))
	h.Start()
	pub := settle.NewPublisher(h.Redis.Client, settle.WithPublishHook(tm.obs.PublishHook()))
	if _, err := pub.Publish(context.Background(), in, "refund"); err != nil {
		t.Fatal(err)
	}
	h.WaitAction(settle.ActionDeadLetter, 1)
	if _, err := admin.NewInspector(h.Redis.Client).Replay(context.Background(), dlq, admin.Filter{}); err != nil {
		t.Fatal(err)
	}
	h.WaitAction(settle.ActionAck, 1)
	h.Stop()

	var dead, replayed sdktrace.ReadOnlySpan
	var publish sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		switch {
		case strings.HasPrefix(s.Name(), "create "):
			dead = s
		case strings.HasPrefix(s.Name(), "send "):
			publish = s
		case s.SpanKind() == trace.SpanKindConsumer && strAttr(s, settleotel.AttrAction) == "ack":
			replayed = s
		}
	}
	if dead == nil || replayed == nil || publish == nil {
		t.Fatalf("spans %s: want a publish, a dead letter and the replay's ack", names(tm.spans.Ended()))
	}
	if !linked(replayed, dead.SpanContext(), settleotel.LinkDeadLetter) {
		t.Fatal("the replayed delivery is not linked to the dead letter's span")
	}
	if !linked(replayed, publish.SpanContext(), settleotel.LinkProducer) {
		t.Fatal("the replayed delivery is not linked to the original publish")
	}
}

// Entries a dead consumer left pending, taken over by a Stream's reclaim, are counted
// in settle.claims{kind=claim}, and their deliveries are redeliveries.
func TestClaimsOfADeadConsumersEntriesAreCountedByKind(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	ctx := context.Background()
	if h.Redis.Real() {
		t.Skip("the reclaim idle runs on the server's clock, which the fake clock cannot move on a real server; this test runs on miniredis")
	}
	in := h.Redis.Key("in")
	rdb := h.Redis.Client
	if err := rdb.XGroupCreateMkStream(ctx, in, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	h.Publish(in, "a")
	h.Publish(in, "b")
	// A consumer that reads and dies: its entries stay pending to it.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{in, ">"}, Count: 10}).Err(); err != nil {
		t.Fatal(err)
	}
	h.Mount(settle.Stream(rdb, in, "g", settle.Reclaim(time.Minute)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.Name("m"))
	h.Start()
	stop := nudge(h, time.Minute)
	h.WaitAction(settle.ActionAck, 2)
	stop()
	h.Stop()

	ms := tm.collect(t)
	if got := sumOf(t, ms, "settle.claims", map[string]string{"settle.mount": "m", "settle.claim.kind": "claim"}); got != 2 {
		t.Fatalf("settle.claims{kind=claim} %d, want 2", got)
	}
	for _, s := range tm.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && !boolAttr(s, settleotel.AttrRedelivery) {
			t.Fatalf("span %s of a claimed entry is not marked a redelivery", s.Name())
		}
	}
}

func boolAttr(s sdktrace.ReadOnlySpan, k attribute.Key) bool { return attrOf(s, k).AsBool() }

// A delayed retry records how late it came back, kept in-process (due → copy written)
// or in a durable delay set (due → delivered again).
func TestDelayedRetriesRecordTheirLateness(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		delay settle.MountOption
	}{
		{"InProcess", settle.DelayIn(delayed.InProcess{})},
		{"DurableZset", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm := newTelemetry(t)
			h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
			in := h.Redis.Key("in")
			opt := tc.delay
			if opt == nil {
				opt = settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("delayed")})
			}
			h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				if m.Attempt == 1 {
					return settle.RetryAfter(time.Minute, nil)
				}
				return nil
			}), settle.Name("m"), opt)
			h.Start()
			h.Publish(in, "x")
			h.WaitAction(settle.ActionPark, 1)
			h.Advance(time.Minute)
			h.WaitAction(settle.ActionAck, 1)
			h.Stop()
			if n, _ := histOf(t, tm.collect(t), "settle.delay.lateness", map[string]string{"settle.mount": "m"}); n != 1 {
				t.Fatalf("settle.delay.lateness counted %d, want 1", n)
			}
		})
	}
}

// The spans settleotel starts are sampled by the tracer provider's sampler alone: with
// a sampler that follows the parent (the SDK's default, ParentBased, here over a 50%
// ratio for roots), a message whose publish was sampled has a span for every attempt,
// and one whose publish was not has none; the metrics count every delivery either way.
func TestAParentBasedSamplerTracesWholeMessagesOrNone(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5))))
	tm := newTelemetry(t, settleotel.WithTracerProvider(tp))
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	in := h.Redis.Key("in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt < 3 {
			return settle.Retry(errors.New("again"))
		}
		return nil
	}), settle.Name("m"), settle.MaxAttempts(5), settle.DeadLetter(h.Redis.Key("dlq")))
	h.Start()
	pub := settle.NewPublisher(h.Redis.Client, settle.WithPublishHook(tm.obs.PublishHook()))
	const n = 40
	for range n {
		if _, err := pub.Publish(context.Background(), in, "x"); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitAction(settle.ActionAck, n)
	h.Stop()

	sends, process := 0, map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			sends++
		case trace.SpanKindConsumer:
			k := strAttr(s, settleotel.AttrMessageKey)
			process[k] = append(process[k], s)
		}
	}
	if sends == 0 || sends == n || len(process) != sends {
		t.Fatalf("%d of %d publishes sampled, %d messages with process spans: want some but not all, and as many", sends, n, len(process))
	}
	for k, ss := range process {
		if len(ss) != 3 {
			t.Fatalf("message %s has %d process spans, want all 3 attempts or none", k, len(ss))
		}
	}
	if got := sumOf(t, tm.collect(t), "messaging.client.consumed.messages", map[string]string{"settle.mount": "m"}); got != 3*n {
		t.Fatalf("messaging.client.consumed.messages %d, want %d: every delivery counted, traced or not", got, 3*n)
	}
}

// An inbox row whose lease passed unsettled (its worker died) is claimed again, counted
// in settle.claims{kind=lease}, and its delivery is a redelivery.
func TestInboxRowsWhoseLeasePassedAreCountedAsLeaseClaims(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	ib, db := newInboxDB(t)
	// A row a dead worker leased long ago: attempt 1 spent, the lease passed.
	if _, err := db.Exec(`INSERT INTO refunds_inbox (name, attempt, locked_until, payload) VALUES ('refunds', 1, '2000-01-01T00:00:00.000+00:00', x'a178')`); err != nil {
		t.Fatal(err)
	}
	h.Mount(ib.Queue("refunds"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.Name("m"))
	h.Start()
	stop := nudge(h, time.Minute)
	h.WaitAction(settle.ActionAck, 1)
	stop()
	h.Stop()
	if got := sumOf(t, tm.collect(t), "settle.claims", map[string]string{"settle.mount": "m", "settle.claim.kind": "lease"}); got != 1 {
		t.Fatalf("settle.claims{kind=lease} %d, want 1", got)
	}
	for _, s := range tm.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && !boolAttr(s, settleotel.AttrRedelivery) {
			t.Fatal("the delivery of a row whose lease passed is not marked a redelivery")
		}
	}
}
