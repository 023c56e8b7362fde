package admin_test

import (
	"errors"
	"testing"

	"github.com/settlekit/settle/admin"
)

func TestDeadLetterCountIsTheSummarysCountInOneCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	n, err := b.insp.DeadLetterCount(b.ctx, b.dlq, false)
	if err != nil || n != deadTotal {
		t.Fatalf("DeadLetterCount = %d, %v; want %d", n, err, deadTotal)
	}
	if n, err := b.insp.DeadLetterCount(b.ctx, b.r.Key("none"), false); err != nil || n != 0 {
		t.Fatalf("a missing key: %d, %v; want 0 and no error", n, err)
	}
	if _, err := b.insp.DeadLetterCount(b.ctx, b.dlq, true); !errors.Is(err, admin.ErrWrongType) {
		t.Fatalf("a stream counted as a list: %v, want ErrWrongType", err)
	}
}

func TestDeadLetterCountCountsADeadLetterList(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	if n, err := b.insp.DeadLetterCount(b.ctx, b.dlq, true); err != nil || n != deadTotal {
		t.Fatalf("DeadLetterCount of the list = %d, %v; want %d", n, err, deadTotal)
	}
}
