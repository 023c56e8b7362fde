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

// TestDlqLsEntriesIsPaged: --entries lists a page (--limit) and says how to read on.
func TestDlqLsEntriesIsPaged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	r := b.ok(t, nil, "dlq", "ls", b.dlq, "--entries", "--limit", "3", "--json")
	if n := strings.Count(r.stdout, "\n"); n != 3 || !strings.Contains(r.stderr, "more: --after ") {
		t.Fatalf("a page of 3: %d lines, stderr %q", n, r.stderr)
	}
	next := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.stderr), "more: --after "))
	r = b.ok(t, nil, "dlq", "ls", b.dlq, "--entries", "--limit", "10", "--after", next, "--json")
	if n := strings.Count(r.stdout, "\n"); n != deadTotal-3 {
		t.Fatalf("the page after %s: %d lines, want %d", next, n, deadTotal-3)
	}
}
