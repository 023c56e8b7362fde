package redislist

import (
	"context"
	"io"
	"testing"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
)

// A read ahead moves new items only, and none while the processing list waits to be read
// again (after a failed settlement): the re-read must not meet an item a read ahead moved
// there and has not counted in flight yet, which it would deliver twice.
func TestReliableListReadAheadMovesNothingWhileTheProcessingListWaitsToBeReadAgain(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	tr := openTestReliableList(t, r.Client, r.Key("in"), source.Policy{Delay: delayed.InProcess{}})
	got := pushAndFetchList(t, r.Client, tr, "a")
	tr.settled(io.ErrUnexpectedEOF, got[0]) // its settlement failed: a is read again first
	if err := r.Client.RPush(ctx, tr.cfg.Key, "b").Err(); err != nil {
		t.Fatal(err)
	}
	if ds, err := tr.FetchAhead(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("FetchAhead = %d deliveries, %v; want none while a waits to be read again", len(ds), err)
	}
	// The re-read takes the new items with it (an item whose settlement keeps failing
	// must not keep the others waiting), after what it reads again.
	ds, err := tr.Fetch(ctx, 10, 0)
	if err != nil || len(ds) != 2 || ds[0].Raw != "a" || ds[1].TakenOver || string(ds[1].Payload) != "b" {
		t.Fatalf("Fetch = %v, %v; want a, read again, then b", ds, err)
	}
	if n := tr.inflightCount(); n != 2 {
		t.Fatalf("%d items in flight, want a and b", n)
	}
	if ds, err := tr.FetchAhead(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("FetchAhead of an empty list = %d, %v; want nothing at once", len(ds), err)
	}
}
