package admin_test

import (
	"strconv"
	"testing"

	"github.com/settlekit/settle/admin"
)

// pages reads every dead letter of key in pages of size, each page from the cursor
// After the last one of the page before, and returns their ids in order.
func pages(t *testing.T, size int, read func(f admin.Filter, limit int) ([]string, error)) []string {
	t.Helper()
	var ids []string
	f := admin.Filter{}
	for range 100 {
		page, err := read(f, size)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, page...)
		if len(page) < size {
			return ids
		}
		f.After = page[len(page)-1]
	}
	t.Fatal("paging did not end")
	return nil
}

func TestDeadLettersPageByIDAfterTheCursorEachOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	all := b.entries(t, b.dlq)
	got := pages(t, 3, func(f admin.Filter, limit int) ([]string, error) {
		dls, err := b.insp.DeadLetters(b.ctx, b.dlq, f, limit)
		ids := make([]string, len(dls))
		for k, d := range dls {
			ids[k] = d.ID
		}
		return ids, err
	})
	if len(got) != len(all) {
		t.Fatalf("pages of 3 gave %d dead letters %v, want the %d of the stream", len(got), got, len(all))
	}
	for k := range all {
		if got[k] != all[k].ID {
			t.Fatalf("page order %v, want the stream's order", got)
		}
	}
	declined, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{After: all[0].ID, Error: "declined"}, 0)
	if err != nil || len(declined) != deadDeclined {
		t.Fatalf("declined after the first = %d, %v; want %d (the filter still applies after the cursor)", len(declined), err, deadDeclined)
	}
}

func TestListDeadLettersPageByIndexAfterTheCursorAndRefuseABadOne(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	got := pages(t, 2, func(f admin.Filter, limit int) ([]string, error) {
		dls, err := b.insp.ListDeadLetters(b.ctx, b.dlq, f, limit)
		ids := make([]string, len(dls))
		for k, d := range dls {
			ids[k] = d.ID
		}
		return ids, err
	})
	if len(got) != deadTotal || got[0] != "0" || got[deadTotal-1] != strconv.Itoa(deadTotal-1) {
		t.Fatalf("pages of 2 gave %v, want indexes 0 to %d each once", got, deadTotal-1)
	}
	if _, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{After: "1-0"}, 0); err == nil || !contains(err, "not an index") {
		t.Fatalf("After 1-0 on a list = %v, want an error saying it is not an index", err)
	}
}
