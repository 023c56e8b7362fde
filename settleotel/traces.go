package settleotel

import (
	"context"
	"encoding/hex"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// Headers settleotel adds to the messages settle writes (settle.HeaderHookPrefix: kept
// by copies, dead letters and replays).
const (
	// HeaderLink is the span of the attempt that wrote a retry copy or parked copy, or
	// of the dead letter, as a W3C traceparent: the next delivery links to it.
	HeaderLink = settle.HeaderHookPrefix + "otel-link"
	// HeaderDue is when a copy parked in a durable delay set is due, in Unix
	// milliseconds: its next delivery records how late it came (settle.delay.lateness).
	HeaderDue = settle.HeaderHookPrefix + "otel-due"
	// HeaderDead marks a dead letter: the span HeaderLink names is the dead letter's
	// own, which the next delivery (a replay, a read of the dead-letter destination)
	// links to as LinkDeadLetter. An inbox's dead row, replayed in place, keeps none of
	// settle's dead-letter headers: this is how its replay knows it is one.
	HeaderDead = settle.HeaderHookPrefix + "otel-dead"
)

// The values of AttrLink on a link: what the linked span is.
const (
	LinkProducer   = "producer"
	LinkPrevious   = "previous_attempt"
	LinkDeadLetter = "dead_letter"
)

// PublishHook returns the hook for settle.WithPublishHook: a PRODUCER span "send KEY"
// per publish, whose context goes into the message's headers (W3C traceparent,
// tracestate), and the publish counted (messaging.client.sent.messages) and timed
// (messaging.client.operation.duration).
func (o *Observer) PublishHook() settle.PublishHook {
	return func(ctx context.Context, p *settle.Publishing) func(string, error) {
		start := time.Now()
		pub := o.publishing(p.Kind, p.Key)
		ctx, span := o.tracer.Start(ctx, pub.spanName, pub.start...)
		if span.IsRecording() {
			span.SetAttributes(semconv.MessagingMessageBodySize(p.Size))
		}
		o.cfg.prop.Inject(ctx, propagation.MapCarrier(p.Headers))
		return func(id string, err error) {
			took := time.Since(start).Seconds()
			if err != nil {
				o.inst.sent.Add(ctx, 1, pub.failedAdd...)
				o.inst.operationDur.Record(ctx, took, pub.failedRecord...)
				span.RecordError(err)
				span.SetAttributes(semconv.ErrorTypeKey.String(errorTypeOther))
				span.SetStatus(codes.Error, "publish failed")
			} else {
				o.inst.sent.Add(ctx, 1, pub.add...)
				o.inst.operationDur.Record(ctx, took, pub.record...)
			}
			if id != "" && span.IsRecording() {
				span.SetAttributes(semconv.MessagingMessageID(id))
			}
			span.End()
		}
	}
}

// publishing is what the publishes to one destination share, built once.
type publishing struct {
	add, failedAdd       []metric.AddOption
	record, failedRecord []metric.RecordOption
	spanName             string
	start                []trace.SpanStartOption
}

type publishKey struct{ kind, key string }

// publishing returns the attribute sets and span options of publishes of kind to key.
func (o *Observer) publishing(kind, key string) *publishing {
	k := publishKey{kind, key}
	if p, ok := o.publishes.Load(k); ok {
		return p.(*publishing)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(system(kind)), semconv.MessagingDestinationName(key),
		semconv.MessagingOperationName(operationSend), AttrTransport.String(kind),
	}
	typed := with(attrs, semconv.MessagingOperationTypeSend)
	failed := semconv.ErrorTypeKey.String(errorTypeOther)
	p := &publishing{
		add:          []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrs...))},
		failedAdd:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(with(attrs, failed)...))},
		record:       []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(typed...))},
		failedRecord: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(with(typed, failed)...))},
		spanName:     operationSend + " " + key,
		start:        []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(typed...)},
	}
	v, _ := o.publishes.LoadOrStore(k, p)
	return v.(*publishing)
}

// The attributes of the links a delivery's span has, by what they link to.
var (
	linkProducer   = []attribute.KeyValue{AttrLink.String(LinkProducer)}
	linkPrevious   = []attribute.KeyValue{AttrLink.String(LinkPrevious)}
	linkDeadLetter = []attribute.KeyValue{AttrLink.String(LinkDeadLetter)}
)

// delivery starts a delivery's CONSUMER span and counts the delivery. Its parent is the
// producer's span the message carries, else the span of the attempt before it (a retry
// of a message published without one), else none; it links to each of them that was
// sampled (a link to a span never recorded leads nowhere).
func (o *Observer) delivery(ctx context.Context, d settle.DeliveryStart) context.Context {
	s := o.seriesOf(d.Mount, d.Transport, d.Key, d.Group)
	o.countDelivery(ctx, s, d)
	var links []trace.Link
	parent := o.cfg.prop.Extract(ctx, propagation.MapCarrier(d.Headers))
	producer := trace.SpanContextFromContext(parent)
	if !producer.IsRemote() {
		producer = trace.SpanContext{} // not the message's: ctx's own, if any
	} else if producer.IsSampled() {
		links = append(links, trace.Link{SpanContext: producer, Attributes: linkProducer})
	}
	if prev, ok := parseTraceparent(d.Headers[HeaderLink]); ok {
		if prev.IsSampled() {
			what := linkPrevious
			if d.Headers[HeaderDead] != "" || d.Headers[settle.HeaderDeadID] != "" || d.Headers[admin.HeaderReplayedFrom] != "" {
				what = linkDeadLetter // read from a dead-letter destination, or replayed from one
			}
			links = append(links, trace.Link{SpanContext: prev, Attributes: what})
		}
		if !producer.IsValid() {
			producer = prev
			parent = trace.ContextWithRemoteSpanContext(parent, prev)
		}
	}
	opts := s.start
	if !producer.IsValid() && trace.SpanContextFromContext(ctx).IsValid() {
		opts = s.startRoot // not a child of whatever span ctx carries
	}
	if len(links) > 0 {
		opts = append(opts[:len(opts):len(opts)], trace.WithLinks(links...))
	}
	ctx, span := o.tracer.Start(parent, s.spanName, opts...)
	if span.IsRecording() {
		// Set on a sampled span only, not given to Start: Start copies what it is given
		// even for a span its sampler drops, and that copy cost more than half of an
		// unsampled delivery's hooks (samplers see the span's name, kind, parent and
		// links).
		span.SetAttributes(s.spanAttrs...)
		span.SetAttributes(semconv.MessagingMessageID(d.ID), AttrAttempt.Int(d.Attempt),
			AttrMessageKey.String(d.MessageKey), AttrRedelivery.Bool(d.Redelivery))
	}
	return ctx
}

// move puts in the message a settlement writes the span it links back to, when that
// span was sampled: the attempt's own, or, for a dead letter, a span of its own,
// "create KEY" (a child of the attempt, messaging.operation.type "create",
// settle.action dead_letter: the dead letter's creation context) that a replay links
// to. An attempt not sampled writes no link (a traceparent costs about ten allocations
// between its write and the next delivery's read): a message that carries its
// producer's context keeps one sampling decision through it anyway, and one published
// without has each later attempt sampled anew as a root. What an earlier settlement of
// the message wrote (a link, a park's due time, a dead letter's mark), which a copy
// inherits, goes.
func (o *Observer) move(ctx context.Context, s settle.Settled, h map[string]string) {
	delete(h, HeaderLink)
	delete(h, HeaderDue)
	delete(h, HeaderDead)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		sc = trace.SpanContext{}
	}
	if s.Action == settle.ActionDeadLetter && sc.IsValid() {
		attrs := with(o.seriesOf(s.Mount, s.Transport, s.Key, s.Group).attrs, semconv.MessagingOperationTypeCreate,
			semconv.MessagingOperationName(operationCreate), AttrAction.String(s.Action.String()), AttrAttempt.Int(s.Attempt), AttrMessageKey.String(s.MessageKey))
		_, span := o.tracer.Start(ctx, operationCreate+" "+s.Key, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		sc = span.SpanContext()
		span.End()
	}
	if sc.IsValid() {
		h[HeaderLink] = traceparent(sc)
		if s.Action == settle.ActionDeadLetter {
			h[HeaderDead] = "1"
		}
	}
	if s.Action == settle.ActionPark && !s.Due {
		h[HeaderDue] = strconv.FormatInt(time.Now().Add(s.Delay).UnixMilli(), 10)
	}
}

// settled records a settlement, and ends its delivery's span after a CLIENT span of the
// settlement, when it wrote anything, under it.
func (o *Observer) settled(ctx context.Context, ev settle.Settled) {
	sr := o.seriesOf(ev.Mount, ev.Transport, ev.Key, ev.Group)
	if !o.countSettled(ctx, sr, ev) {
		return // a due in-process copy: its delivery's span ended when it was parked
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	result := "applied"
	if ev.Err != nil {
		result = "failed"
	}
	settled := []attribute.KeyValue{AttrAction.String(ev.Action.String()), AttrOutcome.String(string(ev.Outcome)), AttrResult.String(result)}
	span.SetAttributes(settled...)
	if wrote(ev) {
		end := time.Now()
		attrs := append(with(sr.attrs, semconv.MessagingOperationTypeSettle, semconv.MessagingOperationName(ev.Action.String()),
			semconv.MessagingMessageID(ev.ID)), settled...)
		_, ss := o.tracer.Start(ctx, ev.Action.String()+" "+ev.Key, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(end.Add(-ev.SettleDuration)), trace.WithAttributes(attrs...))
		if ev.Err != nil {
			ss.RecordError(ev.Err)
			ss.SetAttributes(semconv.ErrorTypeKey.String(errorTypeOther))
			ss.SetStatus(codes.Error, "settlement failed")
		}
		ss.End(trace.WithTimestamp(end))
	}
	switch {
	case ev.Err != nil:
		span.RecordError(ev.Err)
		span.SetAttributes(semconv.ErrorTypeKey.String(errorTypeOther))
		span.SetStatus(codes.Error, "settlement failed")
	case ev.HandlerErr != nil && ev.Outcome != settle.OutcomeDrop:
		span.RecordError(ev.HandlerErr)
		span.SetAttributes(semconv.ErrorTypeKey.String(errorTypeOther))
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// wrote reports whether ev's settlement is a step of its own that writes to the store:
// all but a claiming stream's leave (the entry stays pending), a loss and a channel's
// ack (nothing to write).
func wrote(ev settle.Settled) bool {
	switch {
	case ev.Action == settle.ActionLeave, ev.Action == settle.ActionLose:
		return false
	case ev.Transport == transportChannel:
		return ev.Action != settle.ActionAck && ev.Action != settle.ActionDrop && ev.Action != settle.ActionReject
	}
	return true
}

// traceparent formats sc as a W3C traceparent, in one allocation.
func traceparent(sc trace.SpanContext) string {
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// parseTraceparent reads a W3C traceparent of version 00 ("" or a malformed one:
// false), without allocating.
func parseTraceparent(v string) (trace.SpanContext, bool) {
	if len(v) != 55 || v[:3] != "00-" || v[35] != '-' || v[52] != '-' {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if _, err := hex.Decode(tid[:], []byte(v[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(v[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(v[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
	return sc, sc.IsValid()
}
