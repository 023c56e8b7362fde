package redispubsub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// sourcetest.Subscribed is what a PubSub transport logs once its subscription is confirmed.

func TestPubSub(t *testing.T) {
	t.Parallel()

	t.Run("PatternWithoutOutRetryRefusesToStartNamingTheMount", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		app := sourcetest.NewApp(t, sourcetest.NewRecorder(), nil)
		ok := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })
		app.Mount(settle.PubSubPattern(r.Client, "events.*"), ok, settle.Name("events"))
		app.Mount(settle.PubSubPattern(r.Client, "audit.*"), ok) // unnamed: "channel audit.*"
		app.Mount(settle.PubSubPattern(r.Client, "fine.*", settle.OutRetry("fine.retry")), ok)
		err := app.Run(context.Background())
		if err == nil {
			t.Fatal("Run started a pattern mount without out-retry")
		}
		msg := err.Error()
		for _, want := range []string{"mount events:", "mount channel audit.*:", "OutRetry"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("startup error %q does not mention %q", msg, want)
			}
		}
		if strings.Contains(msg, "fine.*") {
			t.Fatalf("startup error %q refuses the mount that has an out-retry channel", msg)
		}
		var ce *settle.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("error %T, want *settle.ConfigError inside", err)
		}
	})

	t.Run("PatternRetryCopyGoesToOutRetry", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		rec := sourcetest.NewRecorder()
		sink := logtest.New(sourcetest.Subscribed)
		app := sourcetest.NewApp(t, rec, sink.Logger())
		pattern, retry := r.Key("ev.*"), r.Key("ev.retry")
		app.Mount(settle.PubSubPattern(r.Client, pattern, settle.OutRetry(retry)), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if m.Attempt == 1 {
				return settle.Retry(errors.New("first try fails"))
			}
			return nil
		}), settle.MaxAttempts(3))
		stop := sourcetest.StartApp(t, app)
		sourcetest.WaitSubscribed(t, sink)
		if n, err := settle.NewPublisher(r.Client).PublishChannel(ctx, r.Key("ev.signup"), "hi", settle.Headers(map[string]string{"h": "v"})); err != nil || n != 1 {
			t.Fatalf("publish reached %d subscribers (%v), want 1", n, err)
		}
		// The copy's own event may be recorded after the copy's ack: order by attempt.
		evs := rec.WaitFor(t, sourcetest.WaitTimeout, "copy and ack", func(evs []settle.Settled) bool { return len(evs) == 2 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if evs[0].Attempt == 2 {
			evs[0], evs[1] = evs[1], evs[0]
		}
		if evs[0].Action != settle.ActionCopy || evs[0].Attempt != 1 || evs[0].Key != r.Key("ev.signup") {
			t.Fatalf("events %+v; want attempt 1 on ev.signup copied", evs)
		}
		if evs[1].Key != retry || evs[1].Attempt != 2 || evs[1].Action != settle.ActionAck {
			t.Fatalf("second delivery %+v; want attempt 2 acked on the out-retry channel %q", evs[1], retry)
		}
	})

	t.Run("DeadLetterIsPublishedToAChannel", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		channel, dead := r.Key("orders"), r.Key("orders.dead")
		watch := r.Client.Subscribe(ctx, dead)
		defer watch.Close()
		if _, err := watch.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		deadCh := watch.Channel()
		rec := sourcetest.NewRecorder()
		sink := logtest.New(sourcetest.Subscribed)
		app := sourcetest.NewApp(t, rec, sink.Logger())
		app.Mount(settle.PubSub(r.Client, channel), settle.HandlerFunc(func(context.Context, *settle.Message) error {
			return errors.New("cannot")
		}), settle.MaxAttempts(2), settle.DeadLetter(dead))
		stop := sourcetest.StartApp(t, app)
		sourcetest.WaitSubscribed(t, sink)
		if _, err := settle.NewPublisher(r.Client).PublishChannel(ctx, channel, 42, settle.Headers(map[string]string{"tenant": "t1"})); err != nil {
			t.Fatal(err)
		}
		var got string
		select {
		case m := <-deadCh:
			got = m.Payload
		case <-time.After(sourcetest.WaitTimeout):
			t.Fatal("no dead letter on the dead-letter channel")
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		payload, h, _, err := wire.FromEnvelope([]byte(got))
		if err != nil {
			t.Fatal(err)
		}
		var v int
		if err := settle.Msgpack.Unmarshal(payload, &v); err != nil || v != 42 {
			t.Fatalf("dead letter payload %d (%v), want 42", v, err)
		}
		if h["tenant"] != "t1" || h[settle.HeaderRetryCount] != "2" || h[settle.HeaderDeadSource] != channel || h[settle.HeaderDeadError] != "cannot" {
			t.Fatalf("dead letter headers %v", h)
		}
	})

	t.Run("BareMessageIsPayloadWithNoHeaders", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		rec := sourcetest.NewRecorder()
		sink := logtest.New(sourcetest.Subscribed)
		app := sourcetest.NewApp(t, rec, sink.Logger())
		got := make(chan *settle.Message, 1)
		channel := r.Key("plain")
		app.Mount(settle.PubSub(r.Client, channel), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- m
			return nil
		}))
		sourcetest.StartApp(t, app)
		sourcetest.WaitSubscribed(t, sink)
		if err := r.Client.Publish(ctx, channel, `{"from":"redis-cli"}`).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if string(m.Payload) != `{"from":"redis-cli"}` || len(m.Headers) != 0 || m.Attempt != 1 || m.Key != channel {
				t.Fatalf("message %+v; want the bare value, no headers, attempt 1", m)
			}
		case <-time.After(sourcetest.WaitTimeout):
			t.Fatal("no delivery")
		}
	})
}
