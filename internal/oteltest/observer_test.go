package oteltest_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/settleotel"
	"github.com/settlekit/settle/settletest"
)

// telemetry is one test's OpenTelemetry SDK, read in memory.
type telemetry struct {
	obs    *settleotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newTelemetry(t *testing.T, opts ...settleotel.Option) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := settleotel.New(append([]settleotel.Option{settleotel.WithMeterProvider(mp), settleotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{obs: obs, reader: reader, spans: spans}
}

// collect returns the metrics collected now, by name.
func (tm *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// transport is one kind of source, mounted on a harness by the conformance test.
type transport struct {
	name string
	kind string // settle.Settled.Transport
	// retry is the action of a retry under the cap; chained: each attempt's copy links
	// to the attempt before (false where no copy is written: a claiming stream leaves
	// the entry pending, a table updates its row in place).
	retry   settle.Action
	chained bool
	// headers: the transport carries headers, so the producer's span is linked.
	headers bool
	// group is the consumer group a delivery's span names (the inbox's queue for a
	// table); settleSpans is how many of the three settlements write (a claiming
	// stream's leave does not).
	group       string
	settleSpans int
	// dead: the dead letters can be counted (a channel keeps none).
	dead  bool
	mount func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted
}

type mounted struct {
	src       settle.Source
	dest      string
	publish   func(ctx context.Context, pub *settle.Publisher)
	gauges    settleotel.Gauges
	deadCount func() int64
	nudge     time.Duration // a fake clock step while waiting (a claiming stream's min-idle)
}

func transports() []transport {
	streamGauges := func(h *settletest.Harness, key, dlq string) settleotel.Gauges {
		return settleotel.Gauges{Inspector: admin.NewInspector(h.Redis.Client), Streams: []settleotel.StreamGauge{{Mount: "m", Key: key, Group: "g", DeadLetter: dlq}}}
	}
	return []transport{
		{name: "Stream", kind: "stream", group: "g", settleSpans: 3, retry: settle.ActionCopy, chained: true, headers: true, dead: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			in, dlq := h.Redis.Key("s.in"), h.Redis.Key("s.dlq")
			return mounted{src: settle.Stream(h.Redis.Client, in, "g"), dest: dlq, gauges: streamGauges(h, in, dlq),
				publish:   func(ctx context.Context, p *settle.Publisher) { _, err := p.Publish(ctx, in, "refund"); mustOK(t, err) },
				deadCount: func() int64 { return h.Redis.Client.XLen(context.Background(), dlq).Val() }}
		}},
		{name: "ClaimingStream", kind: "stream", group: "g", settleSpans: 1, retry: settle.ActionLeave, headers: true, dead: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			in, dlq := h.Redis.Key("c.in"), h.Redis.Key("c.dlq")
			return mounted{src: settle.ClaimingStream(h.Redis.Client, in, "g", time.Minute), dest: dlq, gauges: streamGauges(h, in, dlq), nudge: time.Minute,
				publish:   func(ctx context.Context, p *settle.Publisher) { _, err := p.Publish(ctx, in, "refund"); mustOK(t, err) },
				deadCount: func() int64 { return h.Redis.Client.XLen(context.Background(), dlq).Val() }}
		}},
		{name: "List", kind: "list", settleSpans: 3, retry: settle.ActionCopy, chained: true, headers: true, dead: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			in, dlq := h.Redis.Key("l.in"), h.Redis.Key("l.dlq")
			return mounted{src: settle.List(h.Redis.Client, in), dest: dlq,
				gauges:    settleotel.Gauges{Inspector: admin.NewInspector(h.Redis.Client), Lists: []settleotel.ListGauge{{Mount: "m", Key: in, DeadLetter: dlq}}},
				publish:   func(ctx context.Context, p *settle.Publisher) { mustOK(t, p.PublishList(ctx, in, "refund")) },
				deadCount: func() int64 { return h.Redis.Client.LLen(context.Background(), dlq).Val() }}
		}},
		{name: "ReliableList", kind: "list", settleSpans: 3, retry: settle.ActionCopy, chained: true, headers: true, dead: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			in, dlq := h.Redis.Key("r.in"), h.Redis.Key("r.dlq")
			return mounted{src: settle.ReliableList(h.Redis.Client, in), dest: dlq,
				gauges:    settleotel.Gauges{Inspector: admin.NewInspector(h.Redis.Client), Lists: []settleotel.ListGauge{{Mount: "m", Key: in, Reliable: true, DeadLetter: dlq}}},
				publish:   func(ctx context.Context, p *settle.Publisher) { mustOK(t, p.PublishList(ctx, in, "refund")) },
				deadCount: func() int64 { return h.Redis.Client.LLen(context.Background(), dlq).Val() }}
		}},
		{name: "PubSub", kind: "channel", settleSpans: 3, retry: settle.ActionCopy, chained: true, headers: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			in, dlq := h.Redis.Key("p.in"), h.Redis.Key("p.dlq")
			return mounted{src: settle.PubSub(h.Redis.Client, in), dest: dlq,
				publish: func(ctx context.Context, p *settle.Publisher) {
					waitSubscribed(t, h, in)
					_, err := p.PublishChannel(ctx, in, "refund")
					mustOK(t, err)
				}}
		}},
		{name: "Inbox", kind: "table", group: "refunds", settleSpans: 3, retry: settle.ActionPutBack, chained: true, headers: true, dead: true, mount: func(t *testing.T, h *settletest.Harness, tm *telemetry) mounted {
			ib, _ := newInboxDB(t, inbox.WithPublishHook(tm.obs.PublishHook()))
			q := ib.Queue("refunds")
			return mounted{src: q, dest: "refunds.dead",
				gauges: settleotel.Gauges{Inboxes: []settleotel.InboxGauge{{Mount: "m", Inbox: ib, Group: "refunds", Dead: "refunds.dead"}}},
				publish: func(ctx context.Context, _ *settle.Publisher) {
					_, err := ib.Publish(ctx, "refunds", "refund")
					mustOK(t, err)
				},
				deadCount: func() int64 {
					v, err := ib.View(context.Background(), "refunds", "refunds.dead")
					mustOK(t, err)
					return v.Dead
				}}
		}},
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitSubscribed waits until channel has a subscriber.
func waitSubscribed(t *testing.T, h *settletest.Harness, channel string) {
	t.Helper()
	deadline := time.Now().Add(settletest.DefaultWait)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for h.Redis.Client.PubSubNumSub(context.Background(), channel).Val()[channel] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber on %s", channel)
		}
		<-tick.C
	}
}

// newInboxDB makes an inbox with opts on a fresh SQLite table with a headers column,
// and returns its database too.
func newInboxDB(t *testing.T, opts ...inbox.InboxOption) (*inbox.Inbox, *sql.DB) {
	t.Helper()
	db, tb := newInboxTable(t)
	tb.Headers = "headers"
	return inbox.New(db, inbox.SQLite, tb, opts...), db
}

// newInboxTable makes a fresh SQLite table and returns its spec, which names no
// headers column (the table has one, named headers).
func newInboxTable(t *testing.T) (*sql.DB, inbox.Table) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "inbox.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	mustOK(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Exec(`CREATE TABLE refunds_inbox (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', attempt INTEGER NOT NULL DEFAULT 1,
		retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')), locked_until TEXT, payload BLOB NOT NULL, headers TEXT)`)
	mustOK(t, err)
	return db, inbox.Table{Name: "refunds_inbox", ID: "id", Group: "name", Attempt: "attempt", RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload"}
}

// Every transport: a message failing three times under MaxAttempts(3) is counted,
// timed and dead-lettered in the metrics, with the mount, transport and destination on
// every series and never an id or an error text; its spans are a publish, three
// attempts linked to it and each to the one before (where a copy carries the link),
// and a dead letter that is the last attempt's child.
func TestEveryTransportReportsOneMessagesLifeAsMetricsAndSpansOfTheMessagingConventions(t *testing.T) {
	t.Parallel()
	for _, tr := range transports() {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			tm := newTelemetry(t)
			logs := slog.New(slog.NewTextHandler(io.Discard, nil))
			h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: logs}))
			mt := tr.mount(t, h, tm)
			if mt.nudge > 0 && h.Redis.Real() {
				t.Skip("a claiming stream's min-idle runs on the server's clock, which the fake clock cannot move on a real server; this case runs on miniredis")
			}
			if len(mt.gauges.Streams)+len(mt.gauges.Lists)+len(mt.gauges.Inboxes) > 0 {
				reg, err := tm.obs.RegisterGauges(mt.gauges)
				mustOK(t, err)
				t.Cleanup(func() { _ = reg.Unregister() })
			}
			h.Mount(mt.src, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				return settle.Retry(fmt.Errorf("refund %d failed", m.Attempt))
			}), settle.Name("m"), settle.MaxAttempts(3), settle.DeadLetter(mt.dest))
			h.Start()
			pub := settle.NewPublisher(h.Redis.Client, settle.WithPublishHook(tm.obs.PublishHook()))
			mt.publish(context.Background(), pub)
			stop := nudge(h, mt.nudge)
			h.WaitAction(settle.ActionDeadLetter, 1)
			stop()
			h.Stop()

			ms := tm.collect(t)
			checkLabels(t, ms)
			base := map[string]string{"settle.mount": "m", "settle.transport": tr.kind}
			if got := sumOf(t, ms, "messaging.client.consumed.messages", base); got != 3 {
				t.Fatalf("messaging.client.consumed.messages %d, want 3", got)
			}
			if got := sumOf(t, ms, "settle.settlements", with(base, "settle.action", tr.retry.String(), "settle.outcome", "retry", "settle.result", "applied")); got != 2 {
				t.Fatalf("settle.settlements{action=%s} %d, want 2", tr.retry, got)
			}
			if got := sumOf(t, ms, "settle.settlements", with(base, "settle.action", "dead_letter", "settle.result", "applied")); got != 1 {
				t.Fatalf("settle.settlements{action=dead_letter} %d, want 1", got)
			}
			if got := sumOf(t, ms, "settle.in_flight", base); got != 0 {
				t.Fatalf("settle.in_flight %d after the last settlement, want 0", got)
			}
			if n, sum := histOf(t, ms, "settle.attempts", base); n != 1 || sum != 3 {
				t.Fatalf("settle.attempts: %d final settlements summing %v, want one at attempt 3", n, sum)
			}
			for _, name := range []string{"messaging.process.duration", "messaging.client.operation.duration"} {
				if n, _ := histOf(t, ms, name, base); n != 3 {
					t.Fatalf("%s counted %d, want 3", name, n)
				}
			}
			if tr.dead {
				if got, want := gaugeOf(t, ms, "settle.dead_letters", base), mt.deadCount(); got != want || want != 1 {
					t.Fatalf("settle.dead_letters %d, dead letters there %d; want 1 and 1", got, want)
				}
			}
			checkChain(t, tm.spans.Ended(), tr)
			checkConventions(t, tm.spans.Ended(), tr)
		})
	}
}

// nudge advances h's clock by step every few milliseconds until stopped (step 0: not at
// all), so that a claiming stream's min-idle passes while the test waits.
func nudge(h *settletest.Harness, step time.Duration) (stop func()) {
	if step == 0 {
		return func() {}
	}
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				h.Clock.Advance(step)
			}
		}
	}()
	return func() { close(quit); <-done }
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// allowed are the only labels settleotel's series may carry.
var allowed = []string{
	"error.type", "messaging.consumer.group.name", "messaging.destination.name", "messaging.operation.name",
	"messaging.operation.type", "messaging.system", "settle.action", "settle.claim.kind",
	"settle.dead_letter.destination", "settle.mount", "settle.outcome", "settle.result", "settle.transport",
}

// checkLabels fails t if any series has a label outside allowed, or lacks what names its
// mount the way its spans do: messaging.system, messaging.destination.name,
// settle.mount (but a publish's) and settle.transport.
func checkLabels(t *testing.T, ms map[string]metricdata.Metrics) {
	t.Helper()
	for name, m := range ms {
		for _, set := range attrSets(m) {
			for _, kv := range set.ToSlice() {
				if !slices.Contains(allowed, string(kv.Key)) {
					t.Fatalf("%s has label %s=%q: only %v are allowed", name, kv.Key, kv.Value.Emit(), allowed)
				}
			}
			for _, must := range []string{"messaging.system", "messaging.destination.name", "settle.mount", "settle.transport"} {
				if op, _ := set.Value("messaging.operation.name"); must == "settle.mount" && op.AsString() == "send" {
					continue // a publish: no mount's
				}
				if _, ok := set.Value(attribute.Key(must)); !ok {
					t.Fatalf("%s has a series without %s: %v", name, must, set.ToSlice())
				}
			}
		}
	}
}

func attrSets(m metricdata.Metrics) []attribute.Set {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return pointAttrs(d.DataPoints)
	case metricdata.Gauge[int64]:
		return pointAttrs(d.DataPoints)
	case metricdata.Gauge[float64]:
		return pointAttrs(d.DataPoints)
	case metricdata.Histogram[int64]:
		return histAttrs(d.DataPoints)
	case metricdata.Histogram[float64]:
		return histAttrs(d.DataPoints)
	}
	return nil
}

func pointAttrs[N int64 | float64](ps []metricdata.DataPoint[N]) []attribute.Set {
	var out []attribute.Set
	for _, p := range ps {
		out = append(out, p.Attributes)
	}
	return out
}

func histAttrs[N int64 | float64](ps []metricdata.HistogramDataPoint[N]) []attribute.Set {
	var out []attribute.Set
	for _, p := range ps {
		out = append(out, p.Attributes)
	}
	return out
}

// matches reports whether set has every label of want.
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		if got, ok := set.Value(attribute.Key(k)); !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// sumOf adds the points of counter (or up-down counter) name that match want.
func sumOf(t *testing.T, ms map[string]metricdata.Metrics, name string, want map[string]string) int64 {
	t.Helper()
	d, ok := ms[name].Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("no int64 sum %s among %v", name, keys(ms))
	}
	var n int64
	for _, p := range d.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// gaugeOf returns the point of gauge name that matches want.
func gaugeOf(t *testing.T, ms map[string]metricdata.Metrics, name string, want map[string]string) int64 {
	t.Helper()
	d, ok := ms[name].Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("no int64 gauge %s among %v", name, keys(ms))
	}
	for _, p := range d.DataPoints {
		if matches(p.Attributes, want) {
			return p.Value
		}
	}
	t.Fatalf("gauge %s has no point %v", name, want)
	return 0
}

// histOf returns the count and sum of histogram name's points that match want.
func histOf(t *testing.T, ms map[string]metricdata.Metrics, name string, want map[string]string) (uint64, float64) {
	t.Helper()
	var n uint64
	var sum float64
	switch d := ms[name].Data.(type) {
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				n, sum = n+p.Count, sum+float64(p.Sum)
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				n, sum = n+p.Count, sum+p.Sum
			}
		}
	default:
		t.Fatalf("no histogram %s among %v", name, keys(ms))
	}
	return n, sum
}

func keys(ms map[string]metricdata.Metrics) []string {
	var out []string
	for k := range ms {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkChain checks the spans of one message that failed three times: a publish, three
// process spans (CONSUMER) that are the publish's children and linked to it, each linked
// to the one before where the transport writes copies, and a dead-letter span, child of
// the third.
func checkChain(t *testing.T, spans []sdktrace.ReadOnlySpan, tr transport) {
	t.Helper()
	var publish sdktrace.ReadOnlySpan
	attempts := map[int64]sdktrace.ReadOnlySpan{}
	var dead sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch {
		case s.SpanKind() == trace.SpanKindProducer && strings.HasPrefix(s.Name(), "send "):
			publish = s
		case s.SpanKind() == trace.SpanKindConsumer:
			attempts[intAttr(s, settleotel.AttrAttempt)] = s
		case strings.HasPrefix(s.Name(), "create "):
			dead = s
		}
	}
	if tr.headers && publish == nil {
		t.Fatalf("no publish span among %s", names(spans))
	}
	if len(attempts) != 3 || dead == nil {
		t.Fatalf("spans %s: want 3 attempts and a dead letter", names(spans))
	}
	for i := int64(1); i <= 3; i++ {
		a := attempts[i]
		if tr.headers && a.Parent().SpanID() != publish.SpanContext().SpanID() {
			t.Fatalf("attempt %d is a child of %v: want the publish span's child (its sampler follows the producer's)", i, a.Parent().SpanID())
		}
		if tr.headers && !linked(a, publish.SpanContext(), settleotel.LinkProducer) {
			t.Fatalf("attempt %d is not linked to the publish span", i)
		}
		if tr.chained && i > 1 && !linked(a, attempts[i-1].SpanContext(), settleotel.LinkPrevious) {
			t.Fatalf("attempt %d is not linked to attempt %d", i, i-1)
		}
		want := tr.retry.String()
		if i == 3 {
			want = "dead_letter"
		}
		if got := strAttr(a, settleotel.AttrAction); got != want {
			t.Fatalf("attempt %d ended with action %q, want %q", i, got, want)
		}
	}
	if dead.Parent().SpanID() != attempts[3].SpanContext().SpanID() {
		t.Fatal("the dead letter's span is not the last attempt's child")
	}
}

// checkConventions fails t unless every span carries the attributes OpenTelemetry's
// messaging conventions require of its operation (and settle's own): the publish's
// "send KEY", each delivery's "process KEY", each settlement that wrote something a
// CLIENT "ACTION KEY" under its delivery's span, with messaging.operation.type and
// .name, messaging.system, messaging.destination.name, messaging.consumer.group.name
// where the mount reads as a group, and messaging.message.id.
func checkConventions(t *testing.T, spans []sdktrace.ReadOnlySpan, tr transport) {
	t.Helper()
	system := "redis"
	if tr.kind == "table" {
		system = "settle"
	}
	var key string
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if s.SpanKind() == trace.SpanKindConsumer {
			key = strAttr(s, "messaging.destination.name")
		}
	}
	if key == "" {
		t.Fatalf("no process span names its destination: %s", names(spans))
	}
	settles := 0
	for _, s := range spans {
		want := map[attribute.Key]string{"messaging.system": system, "settle.transport": tr.kind}
		switch {
		case s.SpanKind() == trace.SpanKindProducer && strings.HasPrefix(s.Name(), "send "):
			want["messaging.operation.type"], want["messaging.operation.name"], want["messaging.destination.name"] = "send", "send", key
		case s.SpanKind() == trace.SpanKindConsumer:
			want["messaging.operation.type"], want["messaging.operation.name"], want["messaging.destination.name"] = "process", "process", key
			want["settle.mount"] = "m"
			if strAttr(s, "messaging.message.id") == "" {
				t.Fatalf("process span %s has no messaging.message.id", s.Name())
			}
			if tr.group != "" {
				want["messaging.consumer.group.name"] = tr.group
			}
		case s.SpanKind() == trace.SpanKindClient:
			settles++
			action := strAttr(s, settleotel.AttrAction)
			want["messaging.operation.type"], want["messaging.operation.name"], want["messaging.destination.name"] = "settle", action, key
			want["settle.mount"] = "m"
			if p, ok := byID[s.Parent().SpanID()]; !ok || p.SpanKind() != trace.SpanKindConsumer || strAttr(p, settleotel.AttrAction) != action {
				t.Fatalf("settle span %s is not the child of its delivery's process span", s.Name())
			}
			if s.Name() != action+" "+key || strAttr(s, "messaging.message.id") == "" {
				t.Fatalf("settle span %q (messaging.message.id %q): want %q and an id", s.Name(), strAttr(s, "messaging.message.id"), action+" "+key)
			}
		case s.SpanKind() == trace.SpanKindProducer && strings.HasPrefix(s.Name(), "create "):
			want["messaging.operation.type"], want["messaging.operation.name"], want["settle.action"] = "create", "create", "dead_letter"
		default:
			t.Fatalf("unexpected span %s(%s)", s.Name(), s.SpanKind())
		}
		for k, v := range want {
			if got := strAttr(s, k); got != v {
				t.Fatalf("span %s(%s): %s=%q, want %q", s.Name(), s.SpanKind(), k, got, v)
			}
		}
	}
	if want := tr.settleSpans; settles != want {
		t.Fatalf("%d settle spans, want %d: %s", settles, want, names(spans))
	}
}

func linked(s sdktrace.ReadOnlySpan, to trace.SpanContext, what string) bool {
	for _, l := range s.Links() {
		if l.SpanContext.SpanID() == to.SpanID() && l.SpanContext.TraceID() == to.TraceID() {
			for _, kv := range l.Attributes {
				if kv.Key == settleotel.AttrLink && kv.Value.AsString() == what {
					return true
				}
			}
		}
	}
	return false
}

// attrOf returns the value of s's attribute k (an empty value when s has none).
func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func intAttr(s sdktrace.ReadOnlySpan, k attribute.Key) int64 { return attrOf(s, k).AsInt64() }

func strAttr(s sdktrace.ReadOnlySpan, k attribute.Key) string { return attrOf(s, k).AsString() }

func names(spans []sdktrace.ReadOnlySpan) string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s(%s)", s.Name(), s.SpanKind()))
	}
	return strings.Join(out, ", ")
}
