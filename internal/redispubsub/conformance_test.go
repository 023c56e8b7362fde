package redispubsub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestPubSubConformance runs the conformance suite on PubSub (which loses a retry
// without a cap and keeps no message for an absent subscriber) and on PubSubPattern
// with an out-retry channel the pattern matches, on miniredis or, with SETTLE_REDIS_URL
// set, on a real server; each on the wall clock and on a fake clock.
func TestPubSubConformance(t *testing.T) {
	t.Parallel()
	f := sourcetest.Features{Ephemeral: true, LosesRetryWithoutCap: true, NeverPaused: true, NoDedupe: true}
	for _, pattern := range []bool{false, true} {
		name := "Channel"
		if pattern {
			name = "Pattern"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("RealClock", func(t *testing.T) {
				t.Parallel()
				sourcetest.Run(t, f, func(t *testing.T) *sourcetest.Subject { return newPubSubSubject(t, pattern, nil) })
			})
			t.Run("FakeClock", func(t *testing.T) {
				t.Parallel()
				sourcetest.Run(t, f, func(t *testing.T) *sourcetest.Subject {
					return newPubSubSubject(t, pattern, sourcetest.NewClock())
				})
			})
		})
	}
}

// newPubSubSubject returns a subscription to a fresh channel (or a pattern matching it
// and its out-retry channel) of t's own Redis. Its dead letters are published to a
// channel the subject itself subscribes to before the App starts.
func newPubSubSubject(t *testing.T, pattern bool, c *sourcetest.Clock) *sourcetest.Subject {
	r := redistest.New(t)
	ctx := context.Background()
	channel, dead := r.Key("ev.in"), r.Key("dead")
	watch := r.Client.Subscribe(ctx, dead)
	t.Cleanup(func() { _ = watch.Close() })
	if _, err := watch.Receive(ctx); err != nil {
		t.Fatalf("subscribe %s: %v", dead, err)
	}
	const marker = "settle-test-marker"
	var mu sync.Mutex
	var deads []string
	markers := make(chan struct{}, 16)
	deadCh := watch.Channel()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for m := range deadCh {
			if m.Payload == marker {
				markers <- struct{}{}
				continue
			}
			mu.Lock()
			deads = append(deads, m.Payload)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = watch.Close(); <-collected })

	sink := logtest.New(sourcetest.Subscribed)
	pub := settle.NewPublisher(r.Client)
	s := &sourcetest.Subject{
		Config:     settle.Config{Logger: sink.Logger()},
		DeadLetter: dead,
		DeadLetters: func(t testing.TB) []sourcetest.Dead {
			t.Helper()
			// Every dead letter was published before its settlement was reported, so
			// before this marker: Redis delivers a channel's messages in order, and
			// once the marker is here every dead letter is.
			if err := r.Client.Publish(ctx, dead, marker).Err(); err != nil {
				t.Fatalf("publish marker: %v", err)
			}
			select {
			case <-markers:
			case <-time.After(sourcetest.WaitTimeout):
				t.Fatal("the marker never came back")
			}
			mu.Lock()
			defer mu.Unlock()
			var out []sourcetest.Dead
			for _, v := range deads {
				out = append(out, sourcetest.ReadDeadEnvelope(t, v))
			}
			return out
		},
		Publish: func(t testing.TB, payload []byte, headers map[string]string) {
			t.Helper()
			select {
			case <-sink.Seen(sourcetest.Subscribed):
			case <-time.After(sourcetest.WaitTimeout):
				t.Fatal("the App never subscribed")
			}
			if _, err := pub.PublishChannelBytes(ctx, channel, payload, settle.Headers(headers)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		},
		Source: settle.PubSub(r.Client, channel),
	}
	if pattern {
		s.Source = settle.PubSubPattern(r.Client, r.Key("ev.*"), settle.OutRetry(r.Key("ev.retry")))
	}
	if c != nil {
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
