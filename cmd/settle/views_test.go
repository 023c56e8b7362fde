package main

import (
	"strings"
	"testing"
)

// TestDlqLsOnAStreamThatHoldsNoDeadLettersSaysSo: a source stream is not counted as
// dead letters.
func TestDlqLsOnAStreamThatHoldsNoDeadLettersSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	r := b.settle(t, nil, "dlq", "ls", b.in)
	if r.code != exitError || !strings.Contains(r.stderr, "holds no dead letters") {
		t.Fatalf("dlq ls of the source stream = exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestAnActionThatSelectsNothingDoesNotSayWould: a real run that found nothing says
// it replayed (deleted) none, not "would".
func TestAnActionThatSelectsNothingDoesNotSayWould(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	for _, verb := range []string{"replay", "purge"} {
		r := b.ok(t, nil, "dlq", verb, b.dlq, "--error", "matches nothing", "--yes")
		if strings.Contains(r.stdout, "would") {
			t.Errorf("dlq %s --yes selecting nothing says %q", verb, r.stdout)
		}
	}
}
