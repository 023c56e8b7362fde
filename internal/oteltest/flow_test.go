package oteltest_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/settlekit/settle"
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
	h.Idle() // the second waits for its start
	h.Advance(time.Second)
	h.WaitSettled(2)
	h.Stop()

	ms := tm.collect(t)
	n, sum := histOf(t, ms, "settle.flow.wait", map[string]string{"settle.mount": "m", string(settleotel.AttrLimitKind): "rate"})
	if n != 1 || sum != 1 {
		t.Fatalf("settle.flow.wait{mount=m, limit_kind=rate}: %d waits, %gs in all; want 1 of 1s", n, sum)
	}
	for _, p := range ms["settle.flow.wait"].Data.(metricdata.Histogram[float64]).DataPoints {
		for _, kv := range p.Attributes.ToSlice() {
			if kv.Value.Emit() == "acct-7" {
				t.Fatalf("settle.flow.wait is labelled %s=%s: the key value", kv.Key, kv.Value.Emit())
			}
		}
	}
}
