package settle_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestStreamRetryCountBeyondTheBoundNeverSkipsTheCap: a retry count written by another
// client that does not fit (MaxInt64, beyond an int, beyond MaxRetryCount) reads as
// MaxRetryCount with one warning: the attempt stays positive and past the cap, so the
// message is dead-lettered at its first failure instead of running past the cap.
func TestStreamRetryCountBeyondTheBoundNeverSkipsTheCap(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	counts := []string{"9223372036854775807", "99999999999999999999999", strconv.Itoa(settle.MaxRetryCount + 1)}
	for _, c := range counts {
		b.XAdd(t, b.In, "payload", "x", settle.HeaderRetryCount, c)
	}
	fail := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("declined") })
	sourcetest.RunApp(t, b.App(t, b.Stream(), fail, settle.MaxAttempts(3), settle.DeadLetter(b.DLQ)))
	evs := sourcetest.WaitFinals(t, b.Rec, len(counts))
	if len(evs) != len(counts) {
		t.Fatalf("%d settlements, want %d: one run each", len(evs), len(counts))
	}
	for _, ev := range evs {
		if ev.Action != settle.ActionDeadLetter || ev.Attempt != settle.MaxRetryCount+1 {
			t.Fatalf("settled %s at attempt %d, want a dead letter at %d: the count read as the bound", ev.Action, ev.Attempt, settle.MaxRetryCount+1)
		}
	}
	dead := b.Entries(t, b.DLQ)
	if len(dead) != len(counts) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(counts))
	}
	for _, d := range dead {
		if got := fmt.Sprint(d.Values[settle.HeaderRetryCount]); got != strconv.Itoa(settle.MaxRetryCount+1) {
			t.Fatalf("dead letter retry count %s, want %d", got, settle.MaxRetryCount+1)
		}
	}
	if n := len(b.Logs.Containing("out-of-range")); n != 1 {
		t.Fatalf("%d out-of-range header logs, want exactly 1", n)
	}
}
