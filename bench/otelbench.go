package main

import (
	"context"
	"sync/atomic"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settleotel"
)

// otelHooks returns settleotel's hooks on an SDK that keeps everything in memory: the
// metrics aggregate in a ManualReader (never collected during the run), and every span
// goes through a batch span processor to an exporter that counts it and keeps nothing
// (keeping 100,000 spans would measure the heap, not settleotel). sample is the root
// share of the user's sampler, ParentBased(TraceIDRatioBased(sample)) (0: the SDK's
// default sampler, ParentBased(AlwaysSample)): settleotel samples nothing of its own,
// and the bench's messages carry no producer's context, so each first delivery is a
// root its sampler decides and every later attempt follows it.
func otelHooks(sample float64) (settle.Hooks, error) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(&countingExporter{})}
	if sample > 0 {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	obs, err := settleotel.New(settleotel.WithMeterProvider(mp), settleotel.WithTracerProvider(tp))
	if err != nil {
		return settle.Hooks{}, err
	}
	return obs.Hooks(), nil
}

// countingExporter is a span exporter that counts the spans it is given.
type countingExporter struct{ spans atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(spans)))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }
