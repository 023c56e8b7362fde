package source_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/settlekit/settle/internal/source"
)

// A transport's taken-over error is source.ErrTakenOver to the engine, wrapped or not,
// keeps its own message and its own identity; another error is not.
func TestTakenOverErrorsAreErrTakenOverAndKeepTheirMessage(t *testing.T) {
	t.Parallel()
	lost := source.TakenOver("the partition's lease was lost")
	wrapped := fmt.Errorf("partition 3: %w", lost)
	if !errors.Is(wrapped, source.ErrTakenOver) || !errors.Is(wrapped, lost) {
		t.Fatalf("%v: errors.Is(ErrTakenOver) %v, errors.Is(itself) %v; want both", wrapped, errors.Is(wrapped, source.ErrTakenOver), errors.Is(wrapped, lost))
	}
	if lost.Error() != "the partition's lease was lost" {
		t.Fatalf("message %q", lost.Error())
	}
	if other := source.TakenOver("another"); errors.Is(lost, other) {
		t.Fatal("two taken-over errors of different messages are the same error")
	}
	if errors.Is(errors.New("timeout"), source.ErrTakenOver) {
		t.Fatal("a plain error is ErrTakenOver")
	}
}
