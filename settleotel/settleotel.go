// Package settleotel turns settle's hooks into OpenTelemetry metrics and traces that
// follow OpenTelemetry's messaging semantic conventions (semconv v1.43.0, the version
// OpenTelemetry Go v1.47 ships).
//
// An Observer fills a settle.Config's Hooks and a Publisher's hook:
//
//	obs, err := settleotel.New(settleotel.WithMeterProvider(mp), settleotel.WithTracerProvider(tp))
//	app, err := settle.New(settle.Config{Hooks: obs.Hooks()})
//	pub := settle.NewPublisher(rdb, settle.WithPublishHook(obs.PublishHook()))
//
// Metrics, as the Prometheus exporter renders them. The conventions' own:
// messaging_client_consumed_messages_total (deliveries handed to a handler),
// messaging_process_duration_seconds (how long handlers ran),
// messaging_client_operation_duration_seconds (settlements, messaging_operation_type
// "settle" and messaging_operation_name the action; publishes, "send"), and
// messaging_client_sent_messages_total (publishes). settle's own, for what the
// conventions do not name: settle_settlements_total{settle_action,settle_outcome,
// settle_result}, settle_attempts (the attempt at each final settlement),
// settle_in_flight, settle_claims_total{settle_claim_kind},
// settle_delay_lateness_seconds, settle_swept_total, settle_read_failures_total,
// settle_flow_wait_seconds{settle_limit_kind} (how long each delivery that waited for
// its mount's flow limits waited before it started: its count is the waits; the kind is
// rate, concurrency or unreachable, never a key value), and,
// read through settle/admin and the inbox's View at collection time (RegisterGauges),
// settle_backlog, settle_consumer_group_lag, settle_pending,
// settle_pending_oldest_idle_seconds, settle_delayed, settle_delayed_overdue,
// settle_dead_letters{settle_dead_letter_destination}, settle_leased,
// settle_expired_leases, and, for mounts with flow limits, settle_flow_waiting,
// settle_flow_in_use and settle_flow_keys_at_limit{settle_limit}. Every series names its mount the way its spans do:
// messaging.system, messaging.destination.name (the key or table the mount reads),
// messaging.consumer.group.name (the consumer group, or the inbox group its rows wait
// in), settle.mount and settle.transport (a publish's: no mount). No message id or
// error text is ever a label.
//
// Traces. Publish starts a PRODUCER span "send KEY" and puts its W3C traceparent and
// tracestate in the message's headers. Every delivery is a CONSUMER span "process KEY"
// (messaging.operation.type and messaging.operation.name "process", messaging.system,
// messaging.destination.name, messaging.consumer.group.name, messaging.message.id, and
// settle.* for the rest), whose parent is the message's producer span when it carries
// one, else the span of the attempt before it when that was sampled, else none: so a
// sampler that follows its parent (the SDK's default, ParentBased) traces a published
// message whole or not at all, and settleotel samples nothing of its own. It also links to the producer's span and to
// the attempt before it: each retry copy, parked copy and dead letter carries the span of
// the attempt that wrote it (HeaderLink), and a dead letter's own span ("create KEY",
// a child of the last attempt) travels with it into a replay from settle/admin.
// Each settlement that writes (all but a claiming stream's leave, a loss and a
// channel's ack) is a CLIENT span "ACTION KEY" under the delivery's
// (messaging.operation.type "settle"). A delivery's span ends when its settlement is
// applied.
//
// A SQL inbox (settle/inbox) carries trace context when its table has a Headers
// column: give the Inbox the hook (inbox.New(db, d, t, inbox.WithPublishHook(
// obs.PublishHook()))), and each row keeps its producer's context and, through a Retry
// (a put-back in place), a RetryAfter, its dead letter and a Replay or Resend, the
// span of the attempt (or dead letter) before it. Without a Headers column the inbox
// is measured alike, but nothing is linked.
//
// messaging.system is "redis" for the Redis transports and "settle" for an inbox
// (a SQL table is not a messaging system; settle's inbox protocol is, as river names
// its own).
package settleotel

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
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

	byMount   sync.Map // mount name -> *series: the last one looked up
	publishes sync.Map // publishKey -> *publishing
	series    sync.Map // seriesKey -> *series
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
	if _, err := o.meter.RegisterCallback(o.observeCounts, o.inst.consumed, o.inst.settlements, o.inst.inFlight); err != nil {
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
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
	tp   trace.TracerProvider
}

// WithMeterProvider records metrics on mp. Defaults to otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider records spans on tp. Defaults to otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithPropagator carries trace context in message headers with p. Defaults to W3C
// Trace Context (traceparent, tracestate).
func WithPropagator(p propagation.TextMapPropagator) Option { return func(c *config) { c.prop = p } }

// series is one (mount, transport, destination, group): its counts, kept with atomics
// and reported at collection time (an SDK counter's Add costs a lookup of its
// attributes on every call), and the attribute sets its other measurements and its
// deliveries' spans use, built once.
type series struct {
	base    metric.MeasurementOption
	record  []metric.RecordOption // {base}, for the histograms' variadic argument
	add     []metric.AddOption    // {base}
	observe []metric.ObserveOption
	// process and processFailed are the attributes of messaging.process.duration (a
	// handler that returned nil or Drop, and one that failed); consumed, of
	// messaging.client.consumed.messages.
	process, processFailed []metric.RecordOption
	consumed               []metric.ObserveOption
	key                    seriesKey
	attrs                  []attribute.KeyValue // every series' and span's: see baseAttrs
	spanName               string               // of its deliveries' spans
	spanAttrs              []attribute.KeyValue // of its deliveries' spans: attrs and the operation's
	start                  []trace.SpanStartOption
	startRoot              []trace.SpanStartOption // start, as a new root

	deliveries atomic.Int64
	inFlight   atomic.Int64
	settles    [settleSlots]atomic.Pointer[settleCount]
	settleOps  [settleSlots]atomic.Pointer[[]metric.RecordOption] // by settleSlot, outcome ignored

	mu     sync.Mutex
	claims map[string][]metric.AddOption
	waits  map[string][]metric.RecordOption // by the limit kind waited for
}

type seriesKey struct{ mount, transport, destination, group string }

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

// Attribute keys of settle's own, on spans and metrics alike (the messaging.* ones are
// semconv's).
const (
	AttrAction     = attribute.Key("settle.action")
	AttrAttempt    = attribute.Key("settle.attempt")
	AttrClaimKind  = attribute.Key("settle.claim.kind")
	AttrDeadLetter = attribute.Key("settle.dead_letter.destination")
	AttrLimit      = attribute.Key("settle.limit")      // a mount's flow limit, by name: rate, rateby, slots, slots2, …
	AttrLimitKind  = attribute.Key("settle.limit_kind") // what a flow wait waited for: rate, concurrency, unreachable
	AttrLink       = attribute.Key("settle.link")
	AttrMessageKey = attribute.Key("settle.message_key")
	AttrMount      = attribute.Key("settle.mount")
	AttrOutcome    = attribute.Key("settle.outcome")
	AttrRedelivery = attribute.Key("settle.redelivery")
	AttrResult     = attribute.Key("settle.result")
	AttrTransport  = attribute.Key("settle.transport")
)

const (
	operationProcess = "process"
	operationSend    = "send"
	operationCreate  = "create"
	errorTypeOther   = "_OTHER" // error.type's fallback value
	transportTable   = "table"
	transportChannel = "channel"
	systemRedis      = "redis"
	systemInbox      = "settle"
)

// system is messaging.system for a transport: "redis", or "settle" for an inbox.
func system(transport string) string {
	if transport == transportTable {
		return systemInbox
	}
	return systemRedis
}

// baseAttrs are the attributes every series of k and every span of its mount carry.
func baseAttrs(k seriesKey) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(system(k.transport)),
		semconv.MessagingDestinationName(k.destination),
		AttrMount.String(k.mount),
		AttrTransport.String(k.transport),
	}
	if k.group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(k.group))
	}
	if id, ok := partitionID(k.transport, k.destination); ok {
		attrs = append(attrs, semconv.MessagingDestinationPartitionID(id))
	}
	return attrs
}

// partitionID returns the index of a PartitionedStream's partition from the stream key
// a delivery was read from (keys.PartitionIndex): its series are labelled
// messaging.destination.partition.id beside the mount, so that one partition's backlog
// or failures show apart. A plain stream whose own key has that shape is labelled alike.
func partitionID(transport, destination string) (string, bool) {
	if transport != "stream" {
		return "", false
	}
	i, ok := keys.PartitionIndex(destination)
	return strconv.Itoa(i), ok
}

// with returns a new slice of attrs and more.
func with(attrs []attribute.KeyValue, more ...attribute.KeyValue) []attribute.KeyValue {
	return append(attrs[:len(attrs):len(attrs)], more...)
}

// seriesOf returns the series of a mount's destination. The last one looked up for a
// mount is found by the mount's name alone (a mount reads one destination but for a
// pattern subscription's channels).
func (o *Observer) seriesOf(mount, transport, destination, group string) *series {
	k := seriesKey{mount, transport, destination, group}
	if s, ok := o.byMount.Load(mount); ok && s.(*series).key == k {
		return s.(*series)
	}
	s, ok := o.series.Load(k)
	if !ok {
		attrs := baseAttrs(k)
		base := metric.WithAttributeSet(attribute.NewSet(attrs...))
		proc := with(attrs, semconv.MessagingOperationName(operationProcess))
		consumer := trace.WithSpanKind(trace.SpanKindConsumer)
		s, _ = o.series.LoadOrStore(k, &series{
			base: base, record: []metric.RecordOption{base}, add: []metric.AddOption{base}, observe: []metric.ObserveOption{base},
			process:       []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(proc...))},
			processFailed: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(with(proc, semconv.ErrorTypeKey.String(errorTypeOther))...))},
			consumed:      []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(proc...))},
			key:           k, attrs: attrs, claims: map[string][]metric.AddOption{}, waits: map[string][]metric.RecordOption{},
			spanName:  operationProcess + " " + destination,
			spanAttrs: with(proc, semconv.MessagingOperationTypeProcess),
			start:     []trace.SpanStartOption{consumer},
			startRoot: []trace.SpanStartOption{consumer, trace.WithNewRoot()},
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
		attrs := with(s.attrs, AttrAction.String(ev.Action.String()), AttrOutcome.String(string(ev.Outcome)), AttrResult.String(result))
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
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(with(s.attrs, AttrClaimKind.String(kind))...))}
	s.claims[kind] = opt
	return opt
}

// waitOpt returns the attributes of a flow wait for a limit of kind.
func (s *series) waitOpt(kind string) []metric.RecordOption {
	s.mu.Lock()
	defer s.mu.Unlock()
	if opt, ok := s.waits[kind]; ok {
		return opt
	}
	opt := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(with(s.attrs, AttrLimitKind.String(kind))...))}
	s.waits[kind] = opt
	return opt
}

// event records a claim, a recovery, a sweep or a failed read.
func (o *Observer) event(ctx context.Context, e settle.Event) {
	s := o.seriesOf(e.Mount, e.Transport, e.Key, e.Group)
	switch e.Kind {
	case settle.EventClaim, settle.EventLease, settle.EventRecovery:
		o.inst.claims.Add(ctx, int64(e.Count), s.claimOpt(string(e.Kind))...)
	case settle.EventSweep:
		o.inst.swept.Add(ctx, int64(e.Count), s.add...)
	case settle.EventReadFailed:
		o.inst.readFailures.Add(ctx, 1, s.add...)
	}
}
