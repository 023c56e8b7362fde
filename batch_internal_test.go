package settle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestATakenOverDeliveryRunsInABatchOfOne: a delivery taken over from a consumer that
// never settled it (which the engine runs alone) runs in a batch of its own at once,
// without waiting for a linger or batch-mates, so that a message that kills its
// process charges no other.
func TestATakenOverDeliveryRunsInABatchOfOne(t *testing.T) {
	t.Parallel()
	var sizes []int
	h := HandleBatch(3, time.Hour, func(_ context.Context, ms []*Message) error {
		sizes = append(sizes, len(ms))
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- h.Handle(t.Context(), &Message{ID: "1-0", takenOver: true}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a taken-over delivery waited for a batch")
	}
	if len(sizes) != 1 || sizes[0] != 1 {
		t.Fatalf("batches of %v, want one batch of 1", sizes)
	}
}

// TestPerMessageWithAnotherCountFailsEveryMessageOfTheBatch: a batch handler that
// gives PerMessage fewer (or more) errors than its batch holds cannot say which is
// whose: every message settles as a failure saying so, none is acked by mistake.
func TestPerMessageWithAnotherCountFailsEveryMessageOfTheBatch(t *testing.T) {
	t.Parallel()
	h := HandleBatch(1, 0, func(context.Context, []*Message) error { return PerMessage(nil) })
	err := h.Handle(t.Context(), &Message{ID: "1-0"})
	if err == nil || errors.As(err, new(*BatchErrors)) {
		t.Fatalf("got %v, want a failure naming the count", err)
	}
	if want := "PerMessage gave 0 errors for a batch of 1 messages"; !strings.Contains(err.Error(), want) {
		t.Fatalf("got %q, want it to say %q", err, want)
	}
}
