package script_test

import (
	"strings"
	"testing"

	"github.com/settlekit/settle/internal/script"
)

// A list replay removes the exact member and pushes only when it removed one: run
// twice (a crash between, a second operator), the second run pushes nothing.
func TestListReplayPushesOnlyWhenItRemovedTheMemberSoASecondRunMovesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dlq, dest := b.r.Key("dlq"), b.r.Key("dest")
	if err := b.r.Client.RPush(b.ctx, dlq, "other", "dead").Err(); err != nil {
		t.Fatal(err)
	}
	for run, want := range []bool{true, false} {
		moved, err := script.ListReplay(b.ctx, b.r.Client, dest, dlq, "dead", []byte("back"))
		if err != nil || moved != want {
			t.Fatalf("run %d: ListReplay = %v, %v; want moved %v", run+1, moved, err, want)
		}
		got, _ := b.r.Client.LRange(b.ctx, dest, 0, -1).Result()
		left, _ := b.r.Client.LRange(b.ctx, dlq, 0, -1).Result()
		if len(got) != 1 || got[0] != "back" || len(left) != 1 || left[0] != "other" {
			t.Fatalf("run %d: destination %q, dead letters %q; want [back] and [other]", run+1, got, left)
		}
	}
	str := b.r.Key("a-string")
	if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := script.ListReplay(b.ctx, b.r.Client, str, dlq, "other", []byte("back")); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("ListReplay to a string = %v, want WRONGTYPE", err)
	}
	if n, _ := b.r.Client.LLen(b.ctx, dlq).Result(); n != 1 {
		t.Fatalf("the refused replay removed the member: %d left, want 1", n)
	}
}
