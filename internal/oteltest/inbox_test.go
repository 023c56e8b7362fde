package oteltest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/settleotel"
	"github.com/settlekit/settle/settletest"
)

// An inbox row whose table has a headers column carries its trace through every kind of
// settlement that keeps it: each attempt links to inbox.Publish's PRODUCER span and to
// the attempt before it, across a Retry (the row put back in place) and a RetryAfter
// (parked through retry_after); the dead letter's span is the last attempt's child, and
// the row replayed from the dead-letter group links to it. How late the parked row came
// is counted once.
func TestInboxAttemptsLinkAcrossAPutBackAndAParkAndItsReplayToTheDeadLetter(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	ib, _ := newInboxDB(t, inbox.WithPublishHook(tm.obs.PublishHook()))
	var calls atomic.Int32
	h.Mount(ib.Queue("refunds"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		switch calls.Add(1) {
		case 1:
			return settle.Retry(errors.New("busy"))
		case 2:
			return settle.RetryAfter(time.Hour, errors.New("later"))
		case 3:
			return errors.New("declined")
		}
		return nil // the replay
	}), settle.Name("m"), settle.MaxAttempts(3), settle.DeadLetter("refunds.dead"))
	h.Start()
	ctx := context.Background()
	_, err := ib.Publish(ctx, "refunds", "refund")
	mustOK(t, err)
	h.WaitAction(settle.ActionPark, 1)
	h.Advance(time.Hour)
	h.WaitAction(settle.ActionDeadLetter, 1)
	_, err = ib.Replay(ctx, "refunds.dead", inbox.Filter{}, inbox.To("refunds"))
	mustOK(t, err)
	h.WaitAction(settle.ActionAck, 1)
	h.Stop()

	var publish, dead, replay sdktrace.ReadOnlySpan
	attempts := map[string]sdktrace.ReadOnlySpan{} // by the action that ended them
	for _, s := range tm.spans.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindProducer && s.Name() == "send refunds_inbox":
			publish = s
		case s.SpanKind() == trace.SpanKindProducer && s.Name() == "create refunds_inbox":
			dead = s
		case s.SpanKind() == trace.SpanKindConsumer && strAttr(s, settleotel.AttrAction) == "ack":
			replay = s
		case s.SpanKind() == trace.SpanKindConsumer:
			attempts[strAttr(s, settleotel.AttrAction)] = s
		}
	}
	putBack, park, last := attempts["put_back"], attempts["park"], attempts["dead_letter"]
	if publish == nil || dead == nil || replay == nil || putBack == nil || park == nil || last == nil {
		t.Fatalf("spans %s: want a publish, attempts ending in put_back, park and dead_letter, a dead letter and the replay's ack", names(tm.spans.Ended()))
	}
	for i, a := range []sdktrace.ReadOnlySpan{putBack, park, last, replay} {
		if !linked(a, publish.SpanContext(), settleotel.LinkProducer) {
			t.Fatalf("delivery %d is not linked to inbox.Publish's span", i+1)
		}
	}
	if !linked(park, putBack.SpanContext(), settleotel.LinkPrevious) {
		t.Fatal("attempt 2 is not linked to attempt 1 across the put-back")
	}
	if !linked(last, park.SpanContext(), settleotel.LinkPrevious) {
		t.Fatal("attempt 3 is not linked to attempt 2 across the park")
	}
	if dead.Parent().SpanID() != last.SpanContext().SpanID() {
		t.Fatal("the dead letter's span is not the last attempt's child")
	}
	if !linked(replay, dead.SpanContext(), settleotel.LinkDeadLetter) {
		t.Fatal("the replayed row is not linked to the dead letter's span")
	}
	if len(replay.Links()) != 2 {
		t.Fatalf("the replayed row has links %v, want the producer and the dead letter only", replay.Links())
	}
	// The park's due time is written into the row for the delivery after it, and gone
	// from the row by the next settlement: the replay is not counted late.
	if n, _ := histOf(t, tm.collect(t), "settle.delay.lateness", map[string]string{"settle.mount": "m"}); n != 1 {
		t.Fatalf("settle.delay.lateness counted %d, want 1: the delivery after the park only", n)
	}
}

// An inbox whose table has no headers column is measured alike, but nothing is linked:
// the publish hook's headers have nowhere to go, and no settlement writes any.
func TestAnInboxWithoutAHeadersColumnIsMeasuredButLinksNothing(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: tm.obs.Hooks(), Logger: quiet()}))
	db, tb := newInboxTable(t)
	ib := inbox.New(db, inbox.SQLite, tb, inbox.WithPublishHook(tm.obs.PublishHook()))
	h.Mount(ib.Queue("refunds"), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.Retry(errors.New("busy"))
		}
		return nil
	}), settle.Name("m"), settle.MaxAttempts(3), settle.DeadLetter("refunds.dead"))
	h.Start()
	_, err := ib.Publish(context.Background(), "refunds", "refund")
	mustOK(t, err)
	h.WaitAction(settle.ActionAck, 1)
	h.Stop()
	consumers := 0
	for _, s := range tm.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			consumers++
			if len(s.Links()) != 0 {
				t.Fatalf("attempt %d has links %v, want none without a headers column", intAttr(s, settleotel.AttrAttempt), s.Links())
			}
		}
	}
	if got := sumOf(t, tm.collect(t), "messaging.client.consumed.messages", map[string]string{"settle.mount": "m"}); got != 2 || consumers != 2 {
		t.Fatalf("messaging.client.consumed.messages %d, consumer spans %d: want 2 and 2", got, consumers)
	}
}
