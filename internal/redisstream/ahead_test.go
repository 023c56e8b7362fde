package redisstream

import (
	"context"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
)

// A read ahead reads new entries only, and none while this consumer's own pending
// entries wait to be read again (after a failed settlement): the re-read must not meet
// an entry a read ahead took from Redis and has not marked in flight yet, nor deliver
// an entry of its own twice.
func TestReadAheadReadsNothingWhileOwnPendingEntriesWaitToBeReadAgain(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	tr := openTestStream(t, r.Client, r.Key("in"), source.Policy{Delay: delayed.InProcess{}})
	got := publishAndFetch(t, r.Client, tr, "a")
	tr.settledIDs(io.ErrUnexpectedEOF, got[0]) // its settlement failed: a is read again first
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: tr.cfg.Key, Values: []any{"payload", "b"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if ds, err := tr.FetchAhead(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("FetchAhead = %d deliveries, %v; want none while a waits to be read again", len(ds), err)
	}
	ds, err := tr.Fetch(ctx, 10, 0)
	if err != nil || len(ds) != 1 || ds[0].ID != got[0].ID || !ds[0].Redelivered {
		t.Fatalf("Fetch = %v, %v; want a, read again", ds, err)
	}
	if ds, err := tr.Fetch(ctx, 10, -1); err != nil || len(ds) != 1 || string(ds[0].Payload) != "b" { // the re-read ends
		t.Fatalf("Fetch = %v, %v; want b", ds, err)
	}
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: tr.cfg.Key, Values: []any{"payload", "c"}}).Err(); err != nil {
		t.Fatal(err)
	}
	ds, err = tr.FetchAhead(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Redelivered || ds[0].TakenOver || string(ds[0].Payload) != "c" {
		t.Fatalf("FetchAhead = %v, %v; want c, new", ds, err)
	}
	if ds, err := tr.FetchAhead(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("FetchAhead of an empty stream = %d, %v; want nothing at once", len(ds), err)
	}
}
