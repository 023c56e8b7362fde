package settleotel

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"

	"github.com/settlekit/settle"
)

// instruments are the Observer's synchronous instruments (the gauges read at collection
// time are in gauges.go).
type instruments struct {
	attempts     metric.Int64Histogram
	claims       metric.Int64Counter
	consumed     metric.Int64ObservableCounter // messaging.client.consumed.messages
	flowWait     metric.Float64Histogram
	inFlight     metric.Int64ObservableUpDownCounter
	lateness     metric.Float64Histogram
	operationDur metric.Float64Histogram // messaging.client.operation.duration: settlements, publishes
	processDur   metric.Float64Histogram // messaging.process.duration
	readFailures metric.Int64Counter
	sent         metric.Int64Counter // messaging.client.sent.messages
	settlements  metric.Int64ObservableCounter
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
		{&in.claims, "settle.claims", "{message}", "Messages taken over from a consumer that stopped or stalled, by kind: claim (stream entries), recovery (reliable list items), lease (inbox rows whose lease passed)."},
		{&in.swept, "settle.swept", "{message}", "Delayed messages a durable delay set's sweep moved back."},
		{&in.readFailures, "settle.read_failures", "{read}", "Reads that failed; the mount backs off and reads again."},
		{&in.sent, messagingconv.ClientSentMessages{}.Name(), "{message}", messagingconv.ClientSentMessages{}.Description()},
	} {
		var e error
		*c.dst, e = m.Int64Counter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc))
		err = errors.Join(err, e)
	}
	for _, h := range []struct {
		dst        *metric.Float64Histogram
		name, desc string
	}{
		{&in.processDur, messagingconv.ProcessDuration{}.Name(), "How long handlers ran."},
		{&in.operationDur, messagingconv.ClientOperationDuration{}.Name(), "How long a settlement took to apply, from the handler's return (messaging.operation.type settle), or a publish (send)."},
		{&in.flowWait, "settle.flow.wait", "How long a delivery waited for its mount's flow limits (RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency) before it started, by the kind of limit it waited for (settle.limit_kind: rate, concurrency, unreachable); deliveries that did not wait are not recorded."},
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
	// The counts are kept with atomics and observed at collection time (observeCounts).
	in.consumed, e = m.Int64ObservableCounter(messagingconv.ClientConsumedMessages{}.Name(), metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries handed to a handler (or settled without one, their attempts spent by crashes)."))
	err = errors.Join(err, e)
	in.settlements, e = m.Int64ObservableCounter("settle.settlements", metric.WithUnit("{settlement}"),
		metric.WithDescription("Settlements by the engine's action, the handler's outcome and whether the settlement was applied."))
	err = errors.Join(err, e)
	in.inFlight, e = m.Int64ObservableUpDownCounter("settle.in_flight", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries started and not yet settled."))
	return errors.Join(err, e)
}

// observeCounts reports every series' counts, at collection time.
func (o *Observer) observeCounts(_ context.Context, obs metric.Observer) error {
	o.series.Range(func(_, v any) bool {
		s := v.(*series)
		if n := s.deliveries.Load(); n > 0 {
			obs.ObserveInt64(o.inst.consumed, n, s.consumed...)
			obs.ObserveInt64(o.inst.inFlight, s.inFlight.Load(), s.observe...)
		}
		for i := range s.settles {
			if c := s.settles[i].Load(); c != nil {
				obs.ObserveInt64(o.inst.settlements, c.n.Load(), c.opt...)
			}
		}
		return true
	})
	return nil
}

// countDelivery counts a delivery starting, how long it waited for its flow limits if
// it did, and how late it came when it is a copy that waited in a durable delay set.
func (o *Observer) countDelivery(ctx context.Context, s *series, d settle.DeliveryStart) {
	s.deliveries.Add(1)
	s.inFlight.Add(1)
	if d.WaitedFor != "" {
		o.inst.flowWait.Record(ctx, d.Waited.Seconds(), s.waitOpt(d.WaitedFor)...)
	}
	if due, ok := d.Headers[HeaderDue]; ok {
		if ms, err := strconv.ParseInt(due, 10, 64); err == nil {
			o.inst.lateness.Record(ctx, max(time.Since(time.UnixMilli(ms)).Seconds(), 0), s.record...)
		}
	}
}

// countSettled records a settlement. It reports whether the settlement ended its
// delivery (false for the write of an in-process delay that came due: the delivery was
// reported when the delay was scheduled).
func (o *Observer) countSettled(ctx context.Context, s *series, ev settle.Settled) bool {
	s.countSettled(ev)
	if op := s.settleOp(ev); op != nil {
		o.inst.operationDur.Record(ctx, ev.SettleDuration.Seconds(), op...)
	}
	if ev.Due {
		o.inst.lateness.Record(ctx, ev.Late.Seconds(), s.record...)
		return false
	}
	s.inFlight.Add(-1)
	if ev.HandlerErr != nil && ev.Outcome != settle.OutcomeDrop {
		o.inst.processDur.Record(ctx, ev.HandlerDuration.Seconds(), s.processFailed...)
	} else {
		o.inst.processDur.Record(ctx, ev.HandlerDuration.Seconds(), s.process...)
	}
	if ev.Final() {
		o.inst.attempts.Record(ctx, int64(ev.Attempt), s.record...)
	}
	return true
}

// settleOp returns the attributes of ev's messaging.client.operation.duration: the
// series', messaging.operation.type settle, messaging.operation.name its action, and
// error.type when it failed (nil for an action settle does not have).
func (s *series) settleOp(ev settle.Settled) []metric.RecordOption {
	slot := settleSlot(settle.Settled{Action: ev.Action, Outcome: settle.OutcomeAck, Err: ev.Err})
	if slot < 0 {
		return nil
	}
	if op := s.settleOps[slot].Load(); op != nil {
		return *op
	}
	attrs := with(s.attrs, semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName(ev.Action.String()))
	if ev.Err != nil {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorTypeOther))
	}
	op := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}
	s.settleOps[slot].CompareAndSwap(nil, &op)
	return *s.settleOps[slot].Load()
}
