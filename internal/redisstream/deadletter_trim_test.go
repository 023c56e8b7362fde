package redisstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// TestReviewMountKeepsEveryDeadLetterPastTheTrimHorizon: the README's review pattern (the
// dead-letter stream mounted like any other, its group acknowledging every dead letter)
// on the App's clock an hour and more ahead: the default trim removes what every group
// acknowledged from the source stream, and nothing from the dead-letter stream.
func TestReviewMountKeepsEveryDeadLetterPastTheTrimHorizon(t *testing.T) {
	t.Parallel()
	h, trimmed := trimmedHarness(t)
	in, dlq := h.Redis.Key("in"), h.Redis.Key("dlq")
	rdb := h.Redis.Client
	h.Mount(settle.Stream(rdb, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		return errors.New("provider unavailable")
	}), settle.MaxAttempts(1), settle.DeadLetter(dlq), settle.Name("refunds"))
	h.Mount(settle.Stream(rdb, dlq, "review"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.Name("review"))
	h.Start()
	reviewed := func(n int) {
		t.Helper()
		h.WaitFor("reviewed dead letters", func(evs []settle.Settled) bool {
			k := 0
			for _, e := range evs {
				if e.Mount == "review" && e.Action == settle.ActionAck {
					k++
				}
			}
			return k >= n
		})
	}
	const n = 20
	for i := range n {
		h.Publish(in, i)
	}
	reviewed(n)
	h.Advance(settle.DefaultTrimKeep + 2*time.Minute)
	if got := waitTrim(t, trimmed); got == 0 {
		t.Fatal("the source stream was not trimmed")
	}
	// Two more dead letters: the review mount's read of the second began after the
	// first's, so after the clock moved: its trim turn ran past the horizon.
	h.Publish(in, n)
	reviewed(n + 1)
	h.Publish(in, n+1)
	reviewed(n + 2)
	if got, err := rdb.XLen(context.Background(), dlq).Result(); err != nil || got != n+2 {
		t.Fatalf("the dead-letter stream holds %d entries (%v); want all %d dead letters", got, err, n+2)
	}
}
