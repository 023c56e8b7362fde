package sourcetest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/wire"
)

// WaitTimeout bounds every wait of a test for something asynchronous to happen.
const WaitTimeout = 15 * time.Second

// ReadStreamDead reads a dead-letter (or reply) stream with XRANGE: the payload field is the
// payload, every other field a header.
func ReadStreamDead(t testing.TB, rdb redis.UniversalClient, key string) []Dead {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("xrange %s: %v", key, err)
	}
	var out []Dead
	for _, m := range msgs {
		d := Dead{Headers: map[string]string{}}
		for k, v := range m.Values {
			s, ok := v.(string)
			if !ok {
				t.Fatalf("dead letter %s field %s is a %T, want a string", m.ID, k, v)
			}
			if k == "payload" {
				d.Payload = []byte(s)
				continue
			}
			d.Headers[k] = s
		}
		if d.Payload == nil {
			t.Fatalf("dead letter %s has no payload field: %v", m.ID, m.Values)
		}
		out = append(out, d)
	}
	return out
}

// Clock is the tests' fake clock (clock.Fake): it moves only by Advance. It is a
// settle.Clock.
type Clock = clock.Fake

// NewClock returns a Clock at 2025-06-01 12:00 UTC.
func NewClock() *Clock { return clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)) }

// ReadDeadEnvelope decodes one dead letter of a list or channel, which must be an
// envelope.
func ReadDeadEnvelope(t testing.TB, v string) Dead {
	t.Helper()
	payload, headers, ok, err := wire.FromEnvelope([]byte(v))
	if err != nil || !ok {
		t.Fatalf("dead letter %q is not an envelope (%v)", v, err)
	}
	if headers == nil {
		headers = map[string]string{}
	}
	return Dead{Headers: headers, Payload: payload}
}

// NewApp returns an App reporting its settlements to rec and logging to logger (nil:
// nowhere), with a 5 s drain.
func NewApp(t *testing.T, rec *Recorder, logger *slog.Logger) *settle.App {
	t.Helper()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	app, err := settle.New(settle.Config{Logger: logger, OnSettled: rec.OnSettled, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// StartApp runs app until the test ends (or stop is called) and returns stop, which
// cancels Run and returns its error.
func StartApp(t *testing.T, app *settle.App) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(WaitTimeout):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Subscribed is what a Pub/Sub mount logs (at Debug) once Redis has confirmed its
// subscription: a test publishes only after it.
const Subscribed = "settle: subscribed"

// WaitSubscribed waits until the App logged its subscription: a message published after
// it is received.
func WaitSubscribed(t testing.TB, sink *logtest.Sink) {
	t.Helper()
	select {
	case <-sink.Seen(Subscribed):
	case <-time.After(WaitTimeout):
		t.Fatal("the App never subscribed")
	}
}

// ReadListDead reads a dead-letter list: each item one envelope.
func ReadListDead(t testing.TB, rdb redis.UniversalClient, key string) []Dead {
	t.Helper()
	vals, err := rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("lrange %s: %v", key, err)
	}
	var out []Dead
	for _, v := range vals {
		out = append(out, ReadDeadEnvelope(t, v))
	}
	return out
}

// DeadListConsumerLeft makes a ReliableList consumer named dead that died holding one
// item per value (each a msgpack string in an envelope) in its processing list of key:
// registered, with no heartbeat, so that a live consumer takes them over.
func DeadListConsumerLeft(t testing.TB, rdb redis.UniversalClient, key, dead string, values ...string) {
	t.Helper()
	ctx := context.Background()
	for _, v := range values {
		payload, err := settle.Msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.RPush(ctx, settle.ProcessingList(key, dead), wire.Envelope(payload, nil)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.SAdd(ctx, keys.ListConsumers(key), dead).Err(); err != nil {
		t.Fatal(err)
	}
}
