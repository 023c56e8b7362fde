// Package settleotel turns settle's hooks into OpenTelemetry metrics and traces.
//
// An Observer fills a settle.Config's Hooks and a Publisher's hook:
//
//	obs, err := settleotel.New(settleotel.WithMeterProvider(mp), settleotel.WithTracerProvider(tp))
//	app, err := settle.New(settle.Config{Hooks: obs.Hooks()})
//	pub := settle.NewPublisher(rdb, settle.WithPublishHook(obs.PublishHook()))
//
// Metrics (as the Prometheus exporter renders them): settle_deliveries_total,
// settle_settlements_total{action,outcome,result}, settle_handler_duration_seconds,
// settle_settlement_duration_seconds, settle_attempts (the attempt at each final
// settlement), settle_in_flight, settle_claims_total{kind}, settle_delay_lateness_seconds,
// settle_read_failures_total, and, read through settle/admin and the inbox's View at
// collection time (RegisterGauges), settle_backlog, settle_consumer_group_lag,
// settle_pending, settle_pending_oldest_idle_seconds, settle_delayed,
// settle_delayed_overdue, settle_dead_letters, settle_leased, settle_expired_leases.
// Every series carries mount, transport and destination; no message id or error text
// is ever a label.
//
// Traces: Publish starts a PRODUCER span and puts W3C traceparent and tracestate in the
// message's headers; every delivery is a CONSUMER span of its own trace, linked to the
// producer's span (a delivery can come long after the publish, so it is not its child),
// and to the attempt before it: each retry copy, parked copy and dead letter carries
// the span of the attempt that wrote it (HeaderLink), and a dead letter's own span
// (a child of the last attempt) travels with it into a replay from settle/admin. One
// message's life, dead letter and replay included, is one chain of links. A span ends
// when its settlement is applied.
//
// A SQL inbox (settle/inbox) carries trace context when its table has a Headers
// column: give the Inbox the hook (inbox.New(db, d, t, inbox.WithPublishHook(
// obs.PublishHook()))), and each row keeps its producer's context and, through a Retry
// (a put-back in place), a RetryAfter, its dead letter and a Replay or Resend, the
// span of the attempt (or dead letter) before it. Without a Headers column the inbox
// is measured alike, but nothing is linked.
package settleotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
)

// ScopeName is the instrumentation scope of settleotel's meter and tracer.
const ScopeName = "github.com/settlekit/settle/settleotel"

// Observer records settle's deliveries, settlements and events as metrics and spans.
// Make one with New; it is safe for concurrent use.
type Observer struct {
	cfg    config
	inst   instruments
	meter  metric.Meter
	tracer trace.Tracer

	byMount sync.Map // mount name -> *series: the last one looked up
	series  sync.Map // seriesKey -> *series
}

// New returns an Observer on the providers the options name (the global ones by
// default).
func New(opts ...Option) (*Observer, error) {
	cfg := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider(), prop: propagation.TraceContext{}, sample: 1}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	o := &Observer{cfg: cfg, meter: cfg.mp.Meter(ScopeName), tracer: cfg.tp.Tracer(ScopeName)}
	if err := o.inst.init(o.meter); err != nil {
		return nil, err
	}
	if _, err := o.meter.RegisterCallback(o.observeCounts, o.inst.deliveries, o.inst.settlements, o.inst.inFlight); err != nil {
		return nil, err
	}
	return o, nil
}

// Hooks returns the settle hooks that feed the Observer, for settle.Config.Hooks. To
// keep hooks of one's own too, call both from one settle.Hooks.
func (o *Observer) Hooks() settle.Hooks {
	return settle.Hooks{Delivery: o.delivery, Event: o.event, Move: o.move, Settled: o.settled}
}

// Option configures an Observer.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	prop    propagation.TextMapPropagator
	sample  float64 // WithSampling's fraction; 1: every message
	semconv bool
	tp      trace.TracerProvider
}

// WithMeterProvider records metrics on mp. Defaults to otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider records spans on tp. Defaults to otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithPropagator carries trace context in message headers with p. Defaults to W3C
// Trace Context (traceparent, tracestate).
func WithPropagator(p propagation.TextMapPropagator) Option { return func(c *config) { c.prop = p } }

// WithSampling traces fraction (0 to 1) of the messages, whole: a message is traced,
// each of its attempts, its dead letter and a replay of it, or none of them, so that
// its chain of links never breaks. A first delivery is traced by a hash of its message
// key (its origin id); one that links to a traced attempt or dead letter always is; a
// publish is traced with probability fraction. A delivery not traced starts no span
// and costs only its metrics. The tracer provider's own sampler still applies to the
// spans started. Defaults to 1: every message.
func WithSampling(fraction float64) Option {
	return func(c *config) { c.sample = min(max(fraction, 0), 1) }
}

// WithSemanticConventions adds OpenTelemetry's messaging semantic conventions to spans
// (messaging.system, messaging.operation.type, messaging.destination.name,
// messaging.consumer.group.name, messaging.message.id) and names them "send KEY" and
// "process KEY", as otelriver does behind its option. Without it, spans carry settle's
// own attributes only and are named "settle.publish KEY", "settle.process KEY".
// Defaults to off.
func WithSemanticConventions() Option { return func(c *config) { c.semconv = true } }

// series is one (mount, transport, destination): its counts, kept with atomics and
// reported at collection time (an SDK counter's Add costs a lookup of its attributes
// on every call), and the attribute sets its other measurements use, built once.
type series struct {
	base     metric.MeasurementOption
	record   []metric.RecordOption // {base}, for the histograms' variadic argument
	add      []metric.AddOption    // {base}
	observe  []metric.ObserveOption
	key      seriesKey
	spanAttr []attribute.KeyValue
	spanName string                  // of its deliveries' spans
	start    []trace.SpanStartOption // of its deliveries' spans: a new root, CONSUMER

	deliveries atomic.Int64
	inFlight   atomic.Int64
	settles    [settleSlots]atomic.Pointer[settleCount]

	mu     sync.Mutex
	claims map[string][]metric.AddOption
}

type seriesKey struct{ mount, transport, destination string }

// settleCount counts the settlements of one (action, outcome, result) of a series.
type settleCount struct {
	n   atomic.Int64
	opt []metric.ObserveOption
}

// outcomes are the outcome kinds, by their index in a series' settles.
var outcomes = [...]settle.OutcomeKind{settle.OutcomeAck, settle.OutcomeDrop, settle.OutcomeRetry, settle.OutcomeRetryAfter}

// settleSlots is the size of a series' settles: actions (below 16) × outcomes × applied
// or failed.
const settleSlots = 16 * len(outcomes) * 2

// settleSlot returns ev's index in a series' settles, or -1 for an action or outcome
// settle does not have (never, unless settle grows one).
func settleSlot(ev settle.Settled) int {
	o := -1
	for i, k := range outcomes {
		if k == ev.Outcome {
			o = i
		}
	}
	if o < 0 || ev.Action >= 16 {
		return -1
	}
	slot := (int(ev.Action)*len(outcomes) + o) * 2
	if ev.Err != nil {
		slot++
	}
	return slot
}

// Label names every series carries.
const (
	LabelDestination = "destination"
	LabelMount       = "mount"
	LabelTransport   = "transport"
)

func baseAttrs(k seriesKey) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(LabelMount, k.mount),
		attribute.String(LabelTransport, k.transport),
		attribute.String(LabelDestination, k.destination),
	}
}

// seriesOf returns the series of a mount's destination. The last one looked up for a
// mount is found by the mount's name alone (a mount reads one destination but for a
// pattern subscription's channels).
func (o *Observer) seriesOf(mount, transport, destination string) *series {
	k := seriesKey{mount, transport, destination}
	if s, ok := o.byMount.Load(mount); ok && s.(*series).key == k {
		return s.(*series)
	}
	s, ok := o.series.Load(k)
	if !ok {
		base := metric.WithAttributeSet(attribute.NewSet(baseAttrs(k)...))
		s, _ = o.series.LoadOrStore(k, &series{
			base: base, record: []metric.RecordOption{base}, add: []metric.AddOption{base}, observe: []metric.ObserveOption{base},
			key: k, spanAttr: o.spanAttrs(mount, transport, destination), claims: map[string][]metric.AddOption{},
			spanName: o.spanName("process", destination), start: []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)},
		})
	}
	o.byMount.Store(mount, s)
	return s.(*series)
}

// countSettled counts ev in the series.
func (s *series) countSettled(ev settle.Settled) {
	slot := settleSlot(ev)
	if slot < 0 {
		return
	}
	c := s.settles[slot].Load()
	if c == nil {
		result := "applied"
		if ev.Err != nil {
			result = "failed"
		}
		attrs := append(baseAttrs(s.key),
			attribute.String("action", ev.Action.String()), attribute.String("outcome", string(ev.Outcome)), attribute.String("result", result))
		s.settles[slot].CompareAndSwap(nil, &settleCount{opt: []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}})
		c = s.settles[slot].Load()
	}
	c.n.Add(1)
}

// claimOpt returns the attributes of a claim of kind.
func (s *series) claimOpt(kind string) []metric.AddOption {
	s.mu.Lock()
	defer s.mu.Unlock()
	if opt, ok := s.claims[kind]; ok {
		return opt
	}
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(baseAttrs(s.key), attribute.String("kind", kind))...))}
	s.claims[kind] = opt
	return opt
}

// event records a claim, a recovery, a sweep or a failed read.
func (o *Observer) event(ctx context.Context, e settle.Event) {
	s := o.seriesOf(e.Mount, e.Transport, e.Key)
	switch e.Kind {
	case settle.EventClaim, settle.EventLease, settle.EventRecovery:
		o.inst.claims.Add(ctx, int64(e.Count), s.claimOpt(string(e.Kind))...)
	case settle.EventSweep:
		o.inst.swept.Add(ctx, int64(e.Count), s.add...)
	case settle.EventReadFailed:
		o.inst.readFailures.Add(ctx, 1, s.add...)
	}
}
