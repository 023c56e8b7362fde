package settleotel

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
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

// Span attribute keys settleotel sets besides the semantic conventions'.
const (
	AttrAction     = attribute.Key("settle.action")
	AttrAttempt    = attribute.Key("settle.attempt")
	AttrLink       = attribute.Key("settle.link")
	AttrMessageKey = attribute.Key("settle.message_key")
	AttrMount      = attribute.Key("settle.mount")
	AttrOutcome    = attribute.Key("settle.outcome")
	AttrRedelivery = attribute.Key("settle.redelivery")
	AttrResult     = attribute.Key("settle.result")
)

// The values of AttrLink on a link: what the linked span is.
const (
	LinkProducer   = "producer"
	LinkPrevious   = "previous_attempt"
	LinkDeadLetter = "dead_letter"
)

// spanAttrs are the attributes every span of a series carries.
func (o *Observer) spanAttrs(mount, transport, destination string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrMount.String(mount)}
	if o.cfg.semconv {
		attrs = append(attrs, semconv.MessagingSystemKey.String("settle."+transport), semconv.MessagingDestinationName(destination))
	}
	return attrs
}

// spanName names a span of op ("process", "send") on destination.
func (o *Observer) spanName(op, destination string) string {
	if o.cfg.semconv {
		return op + " " + destination
	}
	return "settle." + op + " " + destination
}

// PublishHook returns the hook for settle.WithPublishHook: a PRODUCER span per publish,
// whose context goes into the message's headers (W3C traceparent, tracestate).
func (o *Observer) PublishHook() settle.PublishHook {
	return func(ctx context.Context, p *settle.Publishing) func(string, error) {
		if o.cfg.sample < 1 && rand.Float64() >= o.cfg.sample {
			return nil // not traced: see WithSampling
		}
		attrs := []attribute.KeyValue{attribute.String("settle.transport", p.Kind)}
		if o.cfg.semconv {
			attrs = append(attrs, semconv.MessagingSystemKey.String("settle."+p.Kind), semconv.MessagingDestinationName(p.Key),
				semconv.MessagingOperationTypeSend, semconv.MessagingMessageBodySize(p.Size))
		}
		op := "publish"
		if o.cfg.semconv {
			op = "send" // the conventions' name of the operation
		}
		ctx, span := o.tracer.Start(ctx, o.spanName(op, p.Key), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		o.cfg.prop.Inject(ctx, propagation.MapCarrier(p.Headers))
		return func(id string, err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "publish failed")
			}
			if id != "" && o.cfg.semconv {
				span.SetAttributes(semconv.MessagingMessageID(id))
			}
			span.End()
		}
	}
}

// delivery starts a delivery's CONSUMER span, a root linked to its producer and to the
// attempt (or dead letter) before it, and counts the delivery.
func (o *Observer) delivery(ctx context.Context, d settle.DeliveryStart) context.Context {
	s := o.seriesOf(d.Mount, d.Transport, d.Key)
	o.countDelivery(ctx, s, d)
	link, linked := d.Headers[HeaderLink]
	if !linked && !o.sampled(d.MessageKey) {
		return ctx // not traced: see WithSampling
	}
	var links []trace.Link
	if sc := trace.SpanContextFromContext(o.cfg.prop.Extract(ctx, propagation.MapCarrier(d.Headers))); sc.IsValid() {
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(LinkProducer)}})
	}
	if sc, ok := parseTraceparent(link); ok {
		what := LinkPrevious
		if d.Headers[HeaderDead] != "" || d.Headers[settle.HeaderDeadID] != "" || d.Headers[admin.HeaderReplayedFrom] != "" {
			what = LinkDeadLetter // read from a dead-letter destination, or replayed from one
		}
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(what)}})
	}
	attrs := make([]attribute.KeyValue, 0, len(s.spanAttr)+6)
	attrs = append(attrs, s.spanAttr...)
	attrs = append(attrs, AttrAttempt.Int(d.Attempt), AttrMessageKey.String(d.MessageKey), AttrRedelivery.Bool(d.Redelivery))
	if o.cfg.semconv {
		attrs = append(attrs, semconv.MessagingOperationTypeProcess, semconv.MessagingMessageID(d.ID))
		if d.Group != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(d.Group))
		}
	}
	opts := append(s.start[:len(s.start):len(s.start)], trace.WithAttributes(attrs...))
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	ctx, _ = o.tracer.Start(ctx, s.spanName, opts...)
	return ctx
}

// move puts in the message a settlement writes the span it links back to: the
// attempt's own, or, for a dead letter, a span of its own (a child of the attempt) that
// a replay links to. What an earlier settlement of the message wrote (a park's due
// time, a dead letter's mark), which a copy inherits, goes.
func (o *Observer) move(ctx context.Context, s settle.Settled, h map[string]string) {
	delete(h, HeaderDue)
	delete(h, HeaderDead)
	sc := trace.SpanContextFromContext(ctx)
	if s.Action == settle.ActionDeadLetter && sc.IsValid() {
		attrs := []attribute.KeyValue{AttrMount.String(s.Mount), AttrAttempt.Int(s.Attempt), AttrMessageKey.String(s.MessageKey)}
		_, span := o.tracer.Start(ctx, o.spanName("dead_letter", s.Key), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
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

// settled records a settlement and ends its delivery's span.
func (o *Observer) settled(ctx context.Context, ev settle.Settled) {
	if !o.countSettled(ctx, o.seriesOf(ev.Mount, ev.Transport, ev.Key), ev) {
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
	span.SetAttributes(AttrAction.String(ev.Action.String()), AttrOutcome.String(string(ev.Outcome)), AttrResult.String(result))
	switch {
	case ev.Err != nil:
		span.RecordError(ev.Err)
		span.SetStatus(codes.Error, "settlement failed")
	case ev.HandlerErr != nil && ev.Outcome != settle.OutcomeDrop:
		span.RecordError(ev.HandlerErr)
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}

// sampled reports whether a message whose first delivery has key is traced (see
// WithSampling): by a hash of the key, so that every process decides alike.
func (o *Observer) sampled(key string) bool {
	if o.cfg.sample >= 1 {
		return true
	}
	h := uint64(14695981039346656037) // FNV-1a, 64-bit
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	// Keys of one stream differ in their last digits only: mix those into the high bits
	// (murmur3's finalizer) before comparing.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return float64(h) < o.cfg.sample*math.MaxUint64
}

// traceparent formats sc as a W3C traceparent.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// parseTraceparent reads a W3C traceparent ("" or a malformed one: false).
func parseTraceparent(v string) (trace.SpanContext, bool) {
	if v == "" {
		return trace.SpanContext{}, false
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": v}))
	return sc, sc.IsValid()
}
