package script_test

import (
	"slices"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
)

// The ack of stream entries and the marks of their dedup keys are one step: a key is
// marked if and only if its entry was acknowledged by the call, and its mark lives for
// the window from the call's "now", then ends.
func TestStreamDoneMarksOnlyTheKeysOfEntriesItAcknowledged(t *testing.T) {
	t.Parallel()
	b := setupMove(t)
	set := keys.Dedup(b.stream, "g")
	a, c := b.pending(t), b.pending(t)
	const now = int64(1_000_000)
	m := script.Marks{Keys: []string{"ka", ""}, Now: now, Set: set, Window: time.Minute}
	if err := script.StreamDone(b.ctx, b.r.Client, b.stream, "g", []string{a, c}, m); err != nil {
		t.Fatal(err)
	}
	if n := b.r.Client.XPending(b.ctx, b.stream, "g").Val().Count; n != 0 {
		t.Fatalf("%d entries pending after the ack, want 0", n)
	}
	// a was acknowledged already: acking it again with another key marks nothing.
	m.Keys = []string{"again"}
	if err := script.StreamDone(b.ctx, b.r.Client, b.stream, "g", []string{a}, m); err != nil {
		t.Fatal(err)
	}
	seen, err := script.DedupSeen(b.ctx, b.r.Client, set, now, []string{"ka", "again", ""})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false}; !slices.Equal(seen, want) {
		t.Fatalf("seen %v, want %v", seen, want)
	}
	seen, _ = script.DedupSeen(b.ctx, b.r.Client, set, now+time.Minute.Milliseconds(), []string{"ka"})
	if seen[0] {
		t.Fatal("a mark still lives once its window has passed")
	}
	if ttl := b.r.Client.PTTL(b.ctx, set).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the mark set's TTL is %s, want at most the window", ttl)
	}
}

// A mark set of another type fails the ack before anything is written.
func TestStreamDoneWritesNothingWhenTheMarkSetHoldsAnotherType(t *testing.T) {
	t.Parallel()
	b := setupMove(t)
	set := keys.Dedup(b.stream, "g")
	b.r.Client.Set(b.ctx, set, "x", 0)
	id := b.pending(t)
	err := script.StreamDone(b.ctx, b.r.Client, b.stream, "g", []string{id}, script.Marks{Keys: []string{"k"}, Now: -1, Set: set, Window: time.Minute})
	if err == nil {
		t.Fatal("StreamDone returned nil, want WRONGTYPE")
	}
	if n := b.r.Client.XPending(b.ctx, b.stream, "g").Val().Count; n != 1 {
		t.Fatalf("%d entries pending, want 1: a failed call acknowledges nothing", n)
	}
}

// The list ack marks the keys of the items it removed, and only those.
func TestListDoneMarksOnlyTheKeysOfItemsItRemoved(t *testing.T) {
	t.Parallel()
	r := setupMove(t).r
	proc, set := r.Key("{l}:processing"), r.Key("{l}:dedup")
	ctx := t.Context()
	r.Client.RPush(ctx, proc, "a", "b")
	const now = int64(5_000)
	removed, err := script.ListDone(ctx, r.Client, proc, []string{"a", "gone", "b"},
		&script.Marks{Keys: []string{"ka", "kgone", ""}, Now: now, Set: set, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	seen, err := script.DedupSeen(ctx, r.Client, set, now+999, []string{"ka", "kgone"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false}; !slices.Equal(seen, want) {
		t.Fatalf("seen %v, want %v", seen, want)
	}
}

// Ended marks are dropped by later completions, a bounded number per call.
func TestMarksThatEndedAreDroppedByLaterCompletions(t *testing.T) {
	t.Parallel()
	b := setupMove(t)
	set := keys.Dedup(b.stream, "g")
	for i := range 150 {
		id := b.pending(t)
		m := script.Marks{Keys: []string{"k" + string(rune('a'+i%26)) + string(rune('a'+i/26))}, Now: int64(i), Set: set, Window: time.Millisecond}
		if err := script.StreamDone(b.ctx, b.r.Client, b.stream, "g", []string{id}, m); err != nil {
			t.Fatal(err)
		}
	}
	// Each call dropped the marks ended at its now: only the last one's lives.
	if n := b.r.Client.ZCard(b.ctx, set).Val(); n != 1 {
		t.Fatalf("the mark set holds %d marks, want 1", n)
	}
}
