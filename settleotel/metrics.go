package settleotel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the Observer's synchronous instruments (the gauges read at collection
// time are in gauges.go).
type instruments struct {
	attempts     metric.Int64Histogram
	claims       metric.Int64Counter
	deliveries   metric.Int64Counter
	handlerDur   metric.Float64Histogram
	inFlight     metric.Int64UpDownCounter
	lateness     metric.Float64Histogram
	readFailures metric.Int64Counter
	settleDur    metric.Float64Histogram
	settlements  metric.Int64Counter
	swept        metric.Int64Counter
}

// durationBuckets are the boundaries, in seconds, of the duration histograms: from a
// millisecond to a minute.
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// attemptBuckets are the boundaries of the attempts histogram.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50}

func (in *instruments) init(m metric.Meter) error {
	var err error
	for _, c := range []struct {
		dst              *metric.Int64Counter
		name, unit, desc string
	}{
		{&in.deliveries, "settle.deliveries", "{delivery}", "Deliveries handed to a handler (or settled without one, their attempts spent by crashes)."},
		{&in.settlements, "settle.settlements", "{settlement}", "Settlements by the engine's action, the handler's outcome and whether the settlement was applied."},
		{&in.claims, "settle.claims", "{message}", "Messages taken over from a consumer that stopped or stalled: claimed stream entries, recovered list items, rows whose lease passed."},
		{&in.swept, "settle.swept", "{message}", "Delayed messages a durable delay set's sweep moved back."},
		{&in.readFailures, "settle.read_failures", "{read}", "Reads that failed; the mount backs off and reads again."},
	} {
		var e error
		*c.dst, e = m.Int64Counter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc))
		err = errors.Join(err, e)
	}
	for _, h := range []struct {
		dst        *metric.Float64Histogram
		name, desc string
	}{
		{&in.handlerDur, "settle.handler.duration", "How long handlers ran."},
		{&in.settleDur, "settle.settlement.duration", "How long a settlement took to apply, from the handler's return."},
		{&in.lateness, "settle.delay.lateness", "How long after its due time a delayed retry was written back (in-process delays) or delivered again (a durable delay set)."},
	} {
		var e error
		*h.dst, e = m.Float64Histogram(h.name, metric.WithUnit("s"), metric.WithDescription(h.desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		err = errors.Join(err, e)
	}
	var e error
	in.attempts, e = m.Int64Histogram("settle.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("The attempt of each message's final settlement (ack, drop, reject, loss, dead letter)."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	in.inFlight, e = m.Int64UpDownCounter("settle.in_flight", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries started and not yet settled."))
	return errors.Join(err, e)
}
