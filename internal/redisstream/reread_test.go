package redisstream

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
)

// holdReread holds the reply of the next XREADGROUP of own pending entries (an id other
// than ">") once Redis has answered it: ran is closed then, and the reply goes on to the
// consumer only when release is closed.
type holdReread struct {
	armed   atomic.Bool
	ran     chan struct{}
	release chan struct{}
}

func (h *holdReread) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdReread) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *holdReread) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if cmd.Name() == "xreadgroup" && args[len(args)-1] != ">" && h.armed.CompareAndSwap(true, false) {
			close(h.ran)
			<-h.release
		}
		return err
	}
}

// A re-read of own pending entries that Redis answered before an entry's ack ran, but
// whose reply arrives after the ack succeeded, must not deliver the entry again: its
// handler would run twice (found by the Redis restart test: a dropped message ran and
// was dropped a second time by the same consumer).
func TestStreamRereadDoesNotRedeliverAnEntrySettledWhileItWasOut(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("in")
	hold := &holdReread{ran: make(chan struct{}), release: make(chan struct{})}
	o := r.Client.Options()
	client := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username})
	client.AddHook(hold)
	t.Cleanup(func() { _ = client.Close() })

	tr := openTestStream(t, client, key, source.Policy{Delay: delayed.InProcess{}})
	// The first fetch re-reads own pending entries (none), then reads both entries new.
	got := publishAndFetch(t, r.Client, tr, "a", "b")
	// A failed settlement of the second entry asks for a re-read of own pending entries
	// (both are still pending: the first is in flight).
	tr.settledIDs(io.ErrUnexpectedEOF, got[1])

	hold.armed.Store(true)
	type fetched struct {
		ds  []*source.Delivery
		err error
	}
	reread := make(chan fetched, 1)
	go func() {
		ds, err := tr.Fetch(ctx, 10, 50*time.Millisecond)
		reread <- fetched{ds, err}
	}()
	select {
	case <-hold.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the re-read of own pending entries was never sent")
	}
	// Redis answered the re-read with both entries; the first is acked before the reply
	// reaches the consumer.
	if err := tr.Ack(ctx, got[:1]); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	res := <-reread
	if res.err != nil {
		t.Fatal(res.err)
	}
	var ids []string
	for _, d := range res.ds {
		ids = append(ids, d.ID)
	}
	if len(ids) != 1 || ids[0] != got[1].ID {
		t.Fatalf("the re-read delivered %v, want only the unsettled entry %s (not the acked %s)", ids, got[1].ID, got[0].ID)
	}
}

// openTestStream opens a Stream transport on key (group "g", consumer "c1") with policy,
// closed when the test ends.
func openTestStream(t *testing.T, client *redis.Client, key string, policy source.Policy) *streamTransport {
	t.Helper()
	return redistest.OpenTransport[*streamTransport](t, func(env source.Env) source.Transport {
		return New(env, Config{Batch: 100, Block: 50 * time.Millisecond, Client: client, Consumer: "c1", Group: "g", Key: key, Reclaim: time.Minute, StartID: "0", TrimKeep: time.Hour})
	}, policy)
}

// openTestTransport opens src's transport on the real clock, logging nothing, under

// publishAndFetch adds one entry per body to tr's stream (through rdb) and fetches them
// all through tr.
func publishAndFetch(t *testing.T, rdb *redis.Client, tr *streamTransport, bodies ...string) []*source.Delivery {
	t.Helper()
	ctx := context.Background()
	for _, body := range bodies {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: tr.cfg.Key, Values: []any{"payload", body}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return redistest.FetchN(t, tr, len(bodies))
}

// A re-read entry's attempt counts Redis's deliveries of it, also when entries still in
// flight here lie between the re-read ones (one XPENDING spans them all).
func TestStreamRereadCountsDeliveriesAcrossEntriesInFlight(t *testing.T) {
	r := redistest.New(t)
	tr := openTestStream(t, r.Client, r.Key("in"), source.Policy{Delay: delayed.InProcess{}})
	got := publishAndFetch(t, r.Client, tr, "a", "b", "c")
	// The settlements of a and c failed (b is still in flight): both are read again.
	tr.settledIDs(io.ErrUnexpectedEOF, got[0], got[2])
	var again []*source.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(again) < 2; {
		ds, err := tr.Fetch(context.Background(), 10, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ds...)
		if time.Now().After(deadline) {
			t.Fatalf("re-read %d entries, want 2", len(again))
		}
	}
	for _, d := range again {
		if d.ID == got[1].ID {
			t.Fatalf("the entry in flight, %s, was delivered again", d.ID)
		}
		if d.Attempt != 2 {
			t.Fatalf("re-read %s at attempt %d, want 2 (Redis delivered it twice)", d.ID, d.Attempt)
		}
	}
}
