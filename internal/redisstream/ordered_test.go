package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestOrderedStream runs the Ordered scenarios on a plain Stream read under one
// consumer name, on miniredis or, with SETTLE_REDIS_URL set, on a real server, on a
// fake clock.
func TestOrderedStream(t *testing.T) {
	t.Parallel()
	sourcetest.RunOrdered(t, func(t *testing.T) *sourcetest.OrderedSubject {
		r := redistest.New(t)
		in, group, name := r.Key("in"), "workers", "c1"
		pub := settle.NewPublisher(r.Client)
		// Key(k) publishes only to a stream that exists (as its consumers make it).
		if err := r.Client.XGroupCreateMkStream(context.Background(), in, group, "0").Err(); err != nil {
			t.Fatalf("xgroup create: %v", err)
		}
		return &sourcetest.OrderedSubject{
			Clock:      sourcetest.NewClock(),
			DeadLetter: r.Key("dlq"),
			Publish: func(t testing.TB, key, payload string) {
				t.Helper()
				if _, err := pub.PublishBytes(context.Background(), in, []byte(payload), settle.Key(key)); err != nil {
					t.Fatalf("publish: %v", err)
				}
			},
			Crash: func(t testing.TB, n int) {
				t.Helper()
				sourcetest.CrashRead(t, r.Client, in, group, name, n)
			},
			Source: settle.Stream(r.Client, in, group, settle.Consumer(name), settle.Block(50*time.Millisecond)),
			Before: settle.Stream(r.Client, in, group, settle.Consumer(name), settle.Block(50*time.Millisecond)),
		}
	})
}
