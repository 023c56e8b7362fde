package redislist_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

func TestList(t *testing.T) {
	t.Parallel()

	t.Run("PopsInPushOrder", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key := r.Key("jobs")
		pub := settle.NewPublisher(r.Client)
		for i := range 7 {
			if err := pub.PublishList(ctx, key, i); err != nil {
				t.Fatal(err)
			}
		}
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		var mu sync.Mutex
		var got []int
		app.Mount(settle.List(r.Client, key, settle.Batch(3)), settle.Typed(func(_ context.Context, m *settle.Message, v int) error {
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
			return nil
		}), settle.Concurrency(1))
		stop := sourcetest.StartApp(t, app)
		rec.WaitFor(t, sourcetest.WaitTimeout, "7 acks", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 7 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if want := []int{0, 1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v (RPUSH + LPOP is FIFO)", got, want)
		}
	})

	t.Run("ForeignValueIsBarePayloadWithNoHeaders", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		key := r.Key("jobs")
		if err := r.Client.RPush(context.Background(), key, "hello from redis-cli").Err(); err != nil {
			t.Fatal(err)
		}
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		got := make(chan *settle.Message, 1)
		app.Mount(settle.List(r.Client, key), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- m
			return nil
		}), settle.WithCodec(settle.Raw))
		sourcetest.StartApp(t, app)
		var m *settle.Message
		select {
		case m = <-got:
		case <-time.After(sourcetest.WaitTimeout):
			t.Fatal("no delivery")
		}
		var s string
		if err := m.Decode(&s); err != nil || s != "hello from redis-cli" {
			t.Fatalf("Decode = %q, %v; want the bare value", s, err)
		}
		if m.Headers == nil || len(m.Headers) != 0 || m.Attempt != 1 {
			t.Fatalf("headers %v attempt %d; want none and 1", m.Headers, m.Attempt)
		}
	})

	t.Run("InvalidEnvelopeSpendsAttemptsAndDeadLettersIntact", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key, dlq := r.Key("jobs"), r.Key("dead")
		valid := wire.Envelope([]byte("payload"), map[string]string{"a": "b"})
		broken := valid[:len(valid)-2] // starts like an envelope, does not decode
		if err := r.Client.RPush(ctx, key, broken).Err(); err != nil {
			t.Fatal(err)
		}
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		var mu sync.Mutex
		var decodeErrs []error
		app.Mount(settle.List(r.Client, key), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			var v any
			err := m.Decode(&v)
			mu.Lock()
			decodeErrs = append(decodeErrs, err)
			mu.Unlock()
			if string(m.Payload) != string(broken) {
				t.Errorf("payload %q, want the whole value as it arrived", m.Payload)
			}
			return err
		}), settle.MaxAttempts(2), settle.DeadLetter(dlq))
		stop := sourcetest.StartApp(t, app)
		rec.WaitFor(t, sourcetest.WaitTimeout, "a dead letter", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(decodeErrs) != 2 {
			t.Fatalf("%d deliveries, want 2 (MaxAttempts 2)", len(decodeErrs))
		}
		for _, err := range decodeErrs {
			var de *settle.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode error %v, want a *DecodeError", err)
			}
		}
		vals, err := r.Client.LRange(ctx, dlq, 0, -1).Result()
		if err != nil || len(vals) != 1 {
			t.Fatalf("dead-letter list %q: %v; want one item", vals, err)
		}
		payload, headers, ok, err := wire.FromEnvelope([]byte(vals[0]))
		if err != nil || !ok {
			t.Fatalf("dead letter is not an envelope: %v", err)
		}
		if string(payload) != string(broken) {
			t.Fatalf("dead letter payload %q, want the original bytes %q", payload, broken)
		}
		if headers[settle.HeaderInvalidEnvelope] == "" || headers[settle.HeaderRetryCount] != "2" || headers[settle.HeaderDeadSource] != key {
			t.Fatalf("dead letter headers %v; want the invalid-envelope header, retry count 2, source %q", headers, key)
		}
	})

	t.Run("RetryWithoutCapLosesWithOneWarningAndCountsEveryLoss", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key := r.Key("jobs")
		pub := settle.NewPublisher(r.Client)
		for i := range 3 {
			if err := pub.PublishList(ctx, key, i); err != nil {
				t.Fatal(err)
			}
		}
		rec := sourcetest.NewRecorder()
		sink := logtest.New()
		app := sourcetest.NewApp(t, rec, sink.Logger())
		app.Mount(settle.List(r.Client, key), settle.HandlerFunc(func(context.Context, *settle.Message) error {
			return errors.New("boom")
		}))
		stop := sourcetest.StartApp(t, app)
		evs := rec.WaitFor(t, sourcetest.WaitTimeout, "3 losses", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 3 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Action != settle.ActionLose {
				t.Fatalf("action %s, want lose", e.Action)
			}
		}
		if n, _ := r.Client.LLen(ctx, key).Result(); n != 0 {
			t.Fatalf("list holds %d items, want 0: a retry without a cap is lost", n)
		}
		if n := sink.Count(slog.LevelWarn, "retry cannot be honoured without an attempts cap"); n != 1 {
			t.Fatalf("%d loss warnings, want 1 per mount", n)
		}
		v, ok := sink.Attr("messages lost because", "lost")
		if !ok || v.Int64() != 3 {
			t.Fatalf("lost count at shutdown %v (found %v), want 3", v, ok)
		}
	})

	t.Run("DeadLettersLandOnAList", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key, dlq := r.Key("jobs"), r.Key("dead")
		pub := settle.NewPublisher(r.Client)
		if err := pub.PublishList(ctx, key, "x", settle.Headers(map[string]string{"tenant": "t1"})); err != nil {
			t.Fatal(err)
		}
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		app.Mount(settle.List(r.Client, key), settle.HandlerFunc(func(context.Context, *settle.Message) error {
			return errors.New("bad input")
		}), settle.MaxAttempts(3), settle.DeadLetter(dlq))
		stop := sourcetest.StartApp(t, app)
		rec.WaitFor(t, sourcetest.WaitTimeout, "a dead letter", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		typ, _ := r.Client.Type(ctx, dlq).Result()
		if typ != "list" {
			t.Fatalf("dead-letter key is a %q, want a list", typ)
		}
		vals, _ := r.Client.LRange(ctx, dlq, 0, -1).Result()
		if len(vals) != 1 {
			t.Fatalf("%d dead letters, want 1", len(vals))
		}
		_, h, _, err := wire.FromEnvelope([]byte(vals[0]))
		if err != nil || h["tenant"] != "t1" || h[settle.HeaderRetryCount] != "3" || h[settle.HeaderDeadError] != "bad input" {
			t.Fatalf("dead letter headers %v (%v); want the message's own, retry count 3 and the last error", h, err)
		}
	})
}
