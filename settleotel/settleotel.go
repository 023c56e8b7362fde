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
package settleotel

import (
	"context"
	"sync"

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

	series sync.Map // seriesKey -> *series
}

// New returns an Observer on the providers the options name (the global ones by
// default).
func New(opts ...Option) (*Observer, error) {
	cfg := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider(), prop: propagation.TraceContext{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	o := &Observer{cfg: cfg, meter: cfg.mp.Meter(ScopeName), tracer: cfg.tp.Tracer(ScopeName)}
	if err := o.inst.init(o.meter); err != nil {
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

// WithSemanticConventions adds OpenTelemetry's messaging semantic conventions to spans
// (messaging.system, messaging.operation.type, messaging.destination.name,
// messaging.consumer.group.name, messaging.message.id) and names them "send KEY" and
// "process KEY", as otelriver does behind its option. Without it, spans carry settle's
// own attributes only and are named "settle.publish KEY", "settle.process KEY".
// Defaults to off.
func WithSemanticConventions() Option { return func(c *config) { c.semconv = true } }

// series is one (mount, transport, destination) and the attribute sets its
// measurements use, built once.
type series struct {
	base     metric.MeasurementOption
	mu       sync.Mutex
	settles  map[settleKey]metric.MeasurementOption
	claims   map[string]metric.MeasurementOption
	mount    string
	key      string
	kind     string
	spanAttr []attribute.KeyValue
}

type seriesKey struct{ mount, transport, destination string }

type settleKey struct {
	action  settle.Action
	outcome settle.OutcomeKind
	failed  bool
}

// Label names every series carries.
const (
	LabelDestination = "destination"
	LabelMount       = "mount"
	LabelTransport   = "transport"
)

func baseAttrs(mount, transport, destination string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(LabelMount, mount),
		attribute.String(LabelTransport, transport),
		attribute.String(LabelDestination, destination),
	}
}

// seriesOf returns the series of a mount's destination.
func (o *Observer) seriesOf(mount, transport, destination string) *series {
	k := seriesKey{mount, transport, destination}
	if s, ok := o.series.Load(k); ok {
		return s.(*series)
	}
	base := baseAttrs(mount, transport, destination)
	s := &series{
		base:     metric.WithAttributeSet(attribute.NewSet(base...)),
		settles:  map[settleKey]metric.MeasurementOption{},
		claims:   map[string]metric.MeasurementOption{},
		mount:    mount,
		key:      destination,
		kind:     transport,
		spanAttr: o.spanAttrs(mount, transport, destination),
	}
	got, _ := o.series.LoadOrStore(k, s)
	return got.(*series)
}

// settleOpt returns the attributes of a settlement of the series.
func (s *series) settleOpt(ev settle.Settled) metric.MeasurementOption {
	k := settleKey{ev.Action, ev.Outcome, ev.Err != nil}
	s.mu.Lock()
	defer s.mu.Unlock()
	if opt, ok := s.settles[k]; ok {
		return opt
	}
	result := "applied"
	if k.failed {
		result = "failed"
	}
	attrs := append(baseAttrs(s.mount, s.kind, s.key),
		attribute.String("action", ev.Action.String()), attribute.String("outcome", string(ev.Outcome)), attribute.String("result", result))
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	s.settles[k] = opt
	return opt
}

// claimOpt returns the attributes of a claim of kind.
func (s *series) claimOpt(kind string) metric.MeasurementOption {
	s.mu.Lock()
	defer s.mu.Unlock()
	if opt, ok := s.claims[kind]; ok {
		return opt
	}
	opt := metric.WithAttributeSet(attribute.NewSet(append(baseAttrs(s.mount, s.kind, s.key), attribute.String("kind", kind))...))
	s.claims[kind] = opt
	return opt
}

// event records a claim, a recovery, a sweep or a failed read.
func (o *Observer) event(ctx context.Context, e settle.Event) {
	s := o.seriesOf(e.Mount, e.Transport, e.Key)
	switch e.Kind {
	case settle.EventClaim, settle.EventRecovery:
		o.inst.claims.Add(ctx, int64(e.Count), s.claimOpt(string(e.Kind)))
	case settle.EventSweep:
		o.inst.swept.Add(ctx, int64(e.Count), s.base)
	case settle.EventReadFailed:
		o.inst.readFailures.Add(ctx, 1, s.base)
	}
}
