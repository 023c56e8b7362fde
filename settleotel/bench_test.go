package settleotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tnoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settleotel"
)

// benchHooks runs one delivery's hooks (Delivery, then Settled of an ack) b.N times.
func benchHooks(b *testing.B, opts ...settleotel.Option) {
	obs, err := settleotel.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	h := obs.Hooks()
	d := settle.DeliveryStart{Attempt: 1, Group: "g", Headers: map[string]string{}, ID: "1-0", Key: "in", MessageKey: "1-0", Mount: "m", Transport: "stream"}
	ev := settle.Settled{Action: settle.ActionAck, Attempt: 1, Group: "g", ID: "1-0", Key: "in", MessageKey: "1-0", Mount: "m", Outcome: settle.OutcomeAck, Transport: "stream", HandlerDuration: time.Millisecond}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h.Settled(h.Delivery(ctx, d), ev)
	}
}

func sdkMeter() settleotel.Option {
	return settleotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
}

func sdkTracer() settleotel.Option {
	return settleotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter())))
}

func BenchmarkHooksMetricsAndTraces(b *testing.B) { benchHooks(b, sdkMeter(), sdkTracer()) }

func BenchmarkHooksMetricsOnly(b *testing.B) {
	benchHooks(b, sdkMeter(), settleotel.WithTracerProvider(tnoop.NewTracerProvider()))
}

func BenchmarkHooksTracesOnly(b *testing.B) {
	benchHooks(b, settleotel.WithMeterProvider(noop.NewMeterProvider()), sdkTracer())
}

func BenchmarkHooksMetricsAndTracesSampledAt1Percent(b *testing.B) {
	benchHooks(b, sdkMeter(), settleotel.WithTracerProvider(sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))))
}
