package oteltest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/settleotel"
	"github.com/settlekit/settle/settletest"
)

// A delivery that waited for its mount's flow limit records its wait in
// settle.flow.wait, labelled by its mount and the kind of limit, never by the key value
// the limit applied to; a delivery that started at once records nothing.
func TestFlowWaitsAreRecordedByMountAndLimitKindNeverByKeyValue(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	in := h.Redis.Key("in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.Name("m"), settle.RateLimitBy(func(m *settle.Message) string { return m.Headers["acct"] }, 1, time.Second))
	h.Start()
	h.Publish(in, "x", settle.Headers(map[string]string{"acct": "acct-7"}))
	h.Publish(in, "y", settle.Headers(map[string]string{"acct": "acct-7"}))
	h.WaitSettled(1)
	h.Idle()                                // the second waits for its start
	h.Advance(time.Second + time.Second/50) // starts are spaced (per + per/50)/n apart
	h.WaitSettled(2)
	h.Stop()

	ms := tm.collect(t)
	n, sum := histOf(t, ms, "settle.flow.wait", map[string]string{"settle.mount": "m", string(settleotel.AttrLimitKind): "rate"})
	if n != 1 || sum != 1.02 {
		t.Fatalf("settle.flow.wait{mount=m, limit_kind=rate}: %d waits, %gs in all; want 1 of 1.02s", n, sum)
	}
	for _, p := range ms["settle.flow.wait"].Data.(metricdata.Histogram[float64]).DataPoints {
		for _, kv := range p.Attributes.ToSlice() {
			if kv.Value.Emit() == "acct-7" {
				t.Fatalf("settle.flow.wait is labelled %s=%s: the key value", kv.Key, kv.Value.Emit())
			}
		}
	}
}

// RegisterGauges reports a mount's flow limits from settle/admin: each limit's slots in
// use and key values at their limit, labelled by the limit's name, never a key value.
func TestFlowLimitGaugesReportEachLimitByNameNeverByKeyValue(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	r := settletest.Redis(t)
	ctx := context.Background()
	in := r.Key("in")
	store := redisbase.Limits{Client: r.Client, Group: "g", Key: in}
	for _, acct := range []string{"acct-1", "acct-2"} {
		gates := []source.Gate{{Name: "slots", Slots: 1, Lease: time.Minute, Value: acct}, {Name: "slots2", Slots: 5, Lease: time.Minute}}
		if _, err := store.LimitTake(ctx, gates, "token-"+acct, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Client.XGroupCreateMkStream(ctx, in, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	reg, err := tm.obs.RegisterGauges(settleotel.Gauges{Inspector: admin.NewInspector(r.Client), Streams: []settleotel.StreamGauge{{
		Group: "g", Key: in, Mount: "m",
		Limits: []admin.FlowLimit{{Kind: admin.LimitConcurrencyBy, N: 1}, {Kind: admin.LimitGlobalConcurrency, N: 5}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Unregister() }()
	ms := tm.collect(t)
	if got := gaugeOf(t, ms, "settle.flow.in_use", map[string]string{"settle.mount": "m", "settle.limit": "slots2"}); got != 2 {
		t.Errorf("settle.flow.in_use{limit=slots2} %d, want 2", got)
	}
	if got := gaugeOf(t, ms, "settle.flow.keys_at_limit", map[string]string{"settle.mount": "m", "settle.limit": "slots"}); got != 2 {
		t.Errorf("settle.flow.keys_at_limit{limit=slots} %d, want 2", got)
	}
	if got := gaugeOf(t, ms, "settle.flow.waiting", map[string]string{"settle.mount": "m", "settle.limit": "slots"}); got != 0 {
		t.Errorf("settle.flow.waiting{limit=slots} %d, want 0", got)
	}
	for _, name := range []string{"settle.flow.in_use", "settle.flow.keys_at_limit", "settle.flow.waiting"} {
		for _, p := range ms[name].Data.(metricdata.Gauge[int64]).DataPoints {
			for _, kv := range p.Attributes.ToSlice() {
				if strings.HasPrefix(kv.Value.Emit(), "acct-") {
					t.Fatalf("%s is labelled %s=%s: a key value", name, kv.Key, kv.Value.Emit())
				}
			}
		}
	}
}
