package settle_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/faults"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/sourcetest"
)

// newEntriesRead matches an XREADGROUP of new entries (id ">"), not a re-read of own
// pending entries.
func newEntriesRead(req []byte) bool {
	return bytes.Contains(bytes.ToLower(req), []byte("xreadgroup")) && bytes.Contains(req, []byte("\r\n$1\r\n>\r\n"))
}

// entriesReply matches a reply that carries entries (not a nil or empty reply).
func entriesReply(reply []byte) bool {
	return !bytes.HasPrefix(reply, []byte("_")) && !bytes.HasPrefix(reply, []byte("*-1")) && !bytes.HasPrefix(reply, []byte("*0"))
}

// TestStreamRereadsEntriesWhoseReadReplyWasLost: Redis delivered a batch to the
// consumer (XREADGROUP >), but the connection died before the reply reached it. The
// entries are pending at the consumer, unseen; the consumer must re-read its own
// pending entries and handle each once, whether the read fails with a reset (the error
// reaches the transport) or with an EOF (which go-redis would retry on a new
// connection: the retried read sees only newer entries).
func TestStreamRereadsEntriesWhoseReadReplyWasLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		teardown faults.Teardown
	}{{"Reset", faults.Reset}, {"Close", faults.Close}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.New(t)
			ctx := context.Background()
			proxy := faults.Start(t, r.Client.Options().Addr)
			o := r.Client.Options()
			client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DB: o.DB})
			t.Cleanup(func() { _ = client.Close() })

			in := r.Key("in")
			pub := settle.NewPublisher(r.Client)
			var ids []string
			for i := range 3 {
				id, err := pub.Publish(ctx, in, i)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			rule := &faults.Rule{Request: newEntriesRead, Reply: entriesReply, Teardown: tc.teardown}
			proxy.CutReply(rule)

			var mu sync.Mutex
			runs := map[string][]int{} // entry id -> attempts run
			rec := sourcetest.NewRecorder()
			app, err := settle.New(settle.Config{OnSettled: rec.OnSettled, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(settle.Stream(client, in, "g", settle.Consumer("c1"), settle.Block(sourcetest.TestBlock)),
				settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
					mu.Lock()
					runs[m.ID] = append(runs[m.ID], m.Attempt)
					mu.Unlock()
					return nil
				}))
			stop := sourcetest.RunApp(t, app)

			select {
			case <-rule.Done():
			case <-time.After(sourcetest.WaitBound):
				t.Fatal("no read of new entries had its reply cut")
			}
			evs := sourcetest.WaitFinals(t, rec, 3)
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := sourcetest.FinalIDs(evs)
			slices.Sort(got)
			if !slices.Equal(got, ids) {
				t.Fatalf("settled %v, want %v", got, ids)
			}
			for _, e := range evs {
				if e.Action != settle.ActionAck || e.Err != nil {
					t.Fatalf("settlement %+v, want an applied ack", e)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				// Redis delivered it twice (the lost reply, the re-read): the re-read is
				// attempt 2.
				if !slices.Equal(runs[id], []int{2}) {
					t.Fatalf("entry %s ran at attempts %v, want once, at attempt 2", id, runs[id])
				}
			}
			p, err := r.Client.XPending(ctx, in, "g").Result()
			if err != nil || p.Count != 0 {
				t.Fatalf("pending after the drain: %+v, %v; want none", p, err)
			}
		})
	}
}

// listTakeHash is the SHA1 by which EVALSHA names the list_take script.
var listTakeHash = fmt.Sprintf("%x", sha1.Sum([]byte(script.Sources()["list_take"])))

// listMove matches a BLMOVE or an LMOVE, or a call of the list_take script (by its hash
// or its source), alone or in a pipeline.
func listMove(req []byte) bool {
	return bytes.Contains(bytes.ToLower(req), []byte("lmove")) || bytes.Contains(req, []byte(listTakeHash)) || bytes.Contains(req, []byte("list_take.lua"))
}

// itemReply matches a reply that starts with a moved item (BLMOVE's, not a nil reply) or
// with a list of moved items (list_take's, not an empty one).
func itemReply(reply []byte) bool {
	return bytes.HasPrefix(reply, []byte("$")) || bytes.HasPrefix(reply, []byte("*")) && !bytes.HasPrefix(reply, []byte("*0")) && !bytes.HasPrefix(reply, []byte("*-"))
}

// TestReliableListRereadsItemsWhoseMoveReplyWasLost: Redis moved items into the
// consumer's processing list, but the connection died before the reply reached it. The
// items sit in the processing list, unseen; the consumer must re-read it and handle each
// once (at the attempt it was moved at), without waiting for a restart, whether the move
// fails with a reset or with an EOF (which go-redis would retry, moving other items).
func TestReliableListRereadsItemsWhoseMoveReplyWasLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		teardown faults.Teardown
	}{{"Reset", faults.Reset}, {"Close", faults.Close}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.New(t)
			ctx := context.Background()
			proxy := faults.Start(t, r.Client.Options().Addr)
			o := r.Client.Options()
			client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DB: o.DB})
			t.Cleanup(func() { _ = client.Close() })

			in := r.Key("in")
			pub := settle.NewPublisher(r.Client)
			want := []string{"a", "b", "c"}
			for _, v := range want {
				if err := pub.PublishListBytes(ctx, in, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			rule := &faults.Rule{Request: listMove, Reply: itemReply, Teardown: tc.teardown}
			proxy.CutReply(rule)

			var mu sync.Mutex
			runs := map[string][]int{} // payload -> attempts run
			rec := sourcetest.NewRecorder()
			app, err := settle.New(settle.Config{OnSettled: rec.OnSettled, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(settle.ReliableList(client, in, settle.Consumer("c1"), settle.Block(sourcetest.TestBlock)),
				settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
					mu.Lock()
					runs[string(m.Payload)] = append(runs[string(m.Payload)], m.Attempt)
					mu.Unlock()
					return nil
				}), settle.WithCodec(settle.Raw))
			stop := sourcetest.RunApp(t, app)

			select {
			case <-rule.Done():
			case <-time.After(sourcetest.WaitBound):
				t.Fatal("no move had its reply cut")
			}
			evs := sourcetest.WaitFinals(t, rec, 3)
			for _, e := range evs {
				if e.Action != settle.ActionAck || e.Err != nil {
					t.Fatalf("settlement %+v, want an applied ack", e)
				}
			}
			// Checked before the stop: Close would recover the processing list anyway.
			mu.Lock()
			for _, v := range want {
				if !slices.Equal(runs[v], []int{1}) {
					t.Errorf("item %s ran at attempts %v, want once at attempt 1", v, runs[v])
				}
			}
			mu.Unlock()
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, k := range []string{in, settle.ProcessingList(in, "c1")} {
				if n, err := r.Client.LLen(ctx, k).Result(); err != nil || n != 0 {
					t.Fatalf("LLEN %s after the drain = %d, %v; want 0", k, n, err)
				}
			}
		})
	}
}
