package sqltest

import (
	"context"
	"strings"
	"testing"

	"github.com/settlekit/settle/inbox"
)

// Pause writes one control row in the reserved group, whatever how often it is asked;
// Paused sees it; Resume deletes it; and the rows of the group itself are not touched.
func TestInboxPauseIsOneControlRowAndResumeRemovesIt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		db := b.open(t)
		tb := createTable(t, b, db, cols{headers: true}) // the control row writes every column Publish writes
		ib := inbox.New(db, b.d, tb)
		if _, err := ib.PublishBytes(ctx, "jobs", []byte("work")); err != nil {
			t.Fatal(err)
		}
		check := func(want bool) {
			t.Helper()
			got, err := ib.Paused(ctx, "jobs")
			if err != nil {
				t.Fatalf("Paused: %v", err)
			}
			if got != want {
				t.Fatalf("Paused = %v, want %v", got, want)
			}
		}
		check(false)
		for range 2 { // pausing twice is pausing once
			if err := ib.Pause(ctx, "jobs"); err != nil {
				t.Fatalf("Pause: %v", err)
			}
		}
		check(true)
		if p, err := ib.Paused(ctx, "other"); err != nil || p {
			t.Fatalf("Paused(other) = %v, %v; want false: a pause is per group", p, err)
		}
		var control, jobs int
		for _, r := range readRows(t, b, db, tb) {
			switch r.group {
			case inbox.PausedGroup("jobs"):
				control++
				if r.payload != "" || r.leased {
					t.Fatalf("the control row holds payload %q, leased %v; want empty and not leased", r.payload, r.leased)
				}
			case "jobs":
				jobs++
			}
		}
		if control != 1 || jobs != 1 {
			t.Fatalf("got %d control rows and %d rows of the group, want 1 and 1", control, jobs)
		}
		for range 2 { // resuming twice is resuming once
			if err := ib.Resume(ctx, "jobs"); err != nil {
				t.Fatalf("Resume: %v", err)
			}
		}
		check(false)
		if rows := readRows(t, b, db, tb); len(rows) != 1 || rows[0].group != "jobs" {
			t.Fatalf("after Resume the table holds %v, want only the group's row", rows)
		}
	})
}

// A table without a group column has no room for a control row: pausing it is refused
// with an error that says so, and nothing is written.
func TestInboxPauseRefusesATableWithoutAGroupColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		db := b.open(t)
		tb := createTable(t, b, db, cols{noGroup: true})
		ib := inbox.New(db, b.d, tb)
		err := ib.Pause(ctx, "")
		if err == nil || !strings.Contains(err.Error(), "no group column") {
			t.Fatalf("Pause on a table without a group column: got %v, want an error naming the missing group column", err)
		}
		if _, err := ib.Paused(ctx, ""); err == nil {
			t.Fatal("Paused on a table without a group column: got nil, want the same error")
		}
		if rows := readRows(t, b, db, tb); len(rows) != 0 {
			t.Fatalf("the refused pause wrote %d rows", len(rows))
		}
	})
}
