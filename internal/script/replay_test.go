package script_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
)

func TestReplay(t *testing.T) {
	t.Parallel()

	// deadLetter adds a dead letter to b's "dlq" stream and makes the destination
	// stream exist; it returns the dead letter's id and the two keys.
	deadLetter := func(t *testing.T, b *testBundle) (id, dest, dlq string) {
		t.Helper()
		dest, dlq = b.stream, b.r.Key("dlq")
		for _, k := range []string{dest, dlq} {
			if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: k, Values: []any{"payload", "first"}}).Err(); err != nil {
				t.Fatalf("xadd %s: %v", k, err)
			}
		}
		id, err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: dlq, Values: []any{"payload", "dead", "settle-dead-reason", "r"}}).Result()
		if err != nil {
			t.Fatalf("xadd: %v", err)
		}
		return id, dest, dlq
	}

	t.Run("AppendsToDestinationAndDeletesTheDeadLetter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, dest, dlq := deadLetter(t, b)
		newID, moved, err := script.Replay(b.ctx, b.r.Client, dest, dlq, id, []any{"payload", "dead", "replayed", "yes"})
		if err != nil || !moved || newID == "" {
			t.Fatalf("Replay = %q, %v, %v; want a new id", newID, moved, err)
		}
		got, err := b.r.Client.XRange(b.ctx, dest, newID, newID).Result()
		if err != nil || len(got) != 1 || got[0].Values["replayed"] != "yes" || got[0].Values["payload"] != "dead" {
			t.Fatalf("destination entry %v, %v; want the values given", got, err)
		}
		if n, _ := b.r.Client.XLen(b.ctx, dlq).Result(); n != 1 {
			t.Fatalf("dead-letter stream length %d, want 1 (the dead letter deleted)", n)
		}
	})

	t.Run("AGoneDeadLetterMovesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, dest, dlq := deadLetter(t, b)
		if _, _, err := script.Replay(b.ctx, b.r.Client, dest, dlq, id, []any{"payload", "dead"}); err != nil {
			t.Fatal(err)
		}
		_, moved, err := script.Replay(b.ctx, b.r.Client, dest, dlq, id, []any{"payload", "dead"})
		if err != nil || moved {
			t.Fatalf("second Replay = %v, %v; want nothing moved and no error", moved, err)
		}
		if n, _ := b.r.Client.XLen(b.ctx, dest).Result(); n != 2 {
			t.Fatalf("destination length %d, want 2 (one replay, not two)", n)
		}
	})

	t.Run("RefusesAMissingOrWrongTypeDestinationBeforeWriting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id, _, dlq := deadLetter(t, b)
		str := b.r.Key("string")
		if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for dest, want := range map[string]string{b.r.Key("missing"): "does not exist", str: "holds a string"} {
			_, _, err := script.Replay(b.ctx, b.r.Client, dest, dlq, id, []any{"payload", "dead"})
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dest) {
				t.Fatalf("Replay to %s: %v, want an error naming it and saying %q", dest, err, want)
			}
		}
		if n, _ := b.r.Client.XLen(b.ctx, dlq).Result(); n != 2 {
			t.Fatalf("dead-letter stream length %d, want 2 (nothing moved)", n)
		}
	})
}
