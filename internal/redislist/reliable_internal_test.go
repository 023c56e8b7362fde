package redislist

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// openTestReliableList opens a reliable list consumer "c1" of key on client.
func openTestReliableList(t *testing.T, client *redis.Client, key string, policy source.Policy) *reliableTransport {
	t.Helper()
	return redistest.OpenTransport[*reliableTransport](t, func(env source.Env) source.Transport {
		return NewReliable(env, ReliableConfig{Config: Config{Batch: 100, Block: 50 * time.Millisecond, Client: client, Key: key}, Consumer: "c1", Heartbeat: 5 * time.Second})
	}, policy)
}

// pushAndFetchList pushes the values to tr's list (through rdb) and fetches them all.
func pushAndFetchList(t *testing.T, rdb *redis.Client, tr *reliableTransport, values ...string) []*source.Delivery {
	t.Helper()
	ctx := context.Background()
	for _, v := range values {
		if err := rdb.RPush(ctx, tr.cfg.Key, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return redistest.FetchN(t, tr, len(values))
}

func (t *reliableTransport) inflightCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.inflight {
		n += c
	}
	return n
}

// A batch of moves (copies, a dead letter, a put-back) is one list_move script call
// whatever its destinations; each item
// stays in flight (a re-read of the processing list must not deliver it again) until
// the call has answered; a move whose item another consumer recovered meanwhile fails
// alone, and writes nothing.
func TestReliableListMovesWriteABatchInOneCallEachMoveOnItsOwn(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key, dlq := r.Key("in"), r.Key("dlq")
	entered, release := make(chan struct{}), make(chan struct{})
	h := &redistest.ListMoveCalls{Processing: keys.ListProcessing(key, "c1"), Hold: func() { close(entered); <-release }}
	tr := openTestReliableList(t, r.Hooked(t, h), key, source.Policy{DeadLetter: dlq, Delay: delayed.InProcess{}})
	got := pushAndFetchList(t, r.Client, tr, "a", "b", "c", "d", "e")
	// Another consumer recovers c while its copy is asked for.
	if err := r.Client.LRem(ctx, tr.processing, 1, "c").Err(); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{wire.HeaderRetryCount: "1"}
	moves := []source.Move{
		{Action: source.ActionCopy, Delivery: got[0], Headers: headers},
		{Action: source.ActionDeadLetter, Delivery: got[1], Dest: dlq, Headers: headers},
		{Action: source.ActionCopy, Delivery: got[2], Headers: headers},
		{Action: source.ActionCopy, Delivery: got[3], Headers: headers},
		{Action: source.ActionPutBack, Delivery: got[4]},
	}
	answered := make(chan []error, 1)
	go func() { answered <- tr.Moves(ctx, moves) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the moves' script was never called")
	}
	if n := tr.inflightCount(); n != 5 {
		t.Fatalf("%d items in flight while their moves were being written, want 5", n)
	}
	close(release)
	var errs []error
	select {
	case errs = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("Moves did not return")
	}
	if len(errs) != 5 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], errItemGone) || errs[3] != nil || errs[4] != nil {
		t.Fatalf("errors %v, want the copies of a and d, the dead letter of b and the put-back of e applied, the copy of the recovered c refused", errs)
	}
	if calls := h.Recorded(); len(calls) != 1 || calls[0] != 5 {
		t.Fatalf("script calls %+v, want one carrying the 5 moves", calls)
	}
	if n := tr.inflightCount(); n != 0 {
		t.Fatalf("%d items still in flight after their moves were answered", n)
	}
	tr.mu.Lock()
	rescan := tr.rescan
	tr.mu.Unlock()
	if rescan {
		t.Fatal("a move refused because another consumer took the item asked for a re-read of the processing list")
	}
	copyOf := func(v string) string { return string(wire.Envelope([]byte(v), headers)) }
	if l, err := r.Client.LRange(ctx, key, 0, -1).Result(); err != nil || !slices.Equal(l, []string{copyOf("a"), copyOf("d"), "e"}) {
		t.Fatalf("list %q, %v; want the copies of a and d, then e put back as it was, in order", l, err)
	}
	if l, err := r.Client.LRange(ctx, dlq, 0, -1).Result(); err != nil || !slices.Equal(l, []string{copyOf("b")}) {
		t.Fatalf("dead-letter list %q, %v; want b's dead letter", l, err)
	}
	if n, err := r.Client.LLen(ctx, tr.processing).Result(); err != nil || n != 0 {
		t.Fatalf("processing list holds %d items, %v; want none", n, err)
	}
}

// The count of taken-over items outstanding cannot stick above zero, which would stop
// recovery for good: a taken item that left the processing list before it was
// delivered (another consumer recovered this one's list) still becomes a delivery whose
// ack finds it gone, and a settlement that failed counts the item out (a re-read
// delivers it again, uncounted); each time the next lot follows at once.
func TestReliableListTakeoverCountSettlesWhateverBecomesOfTheLot(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("in")
	dead := keys.ListProcessing(key, "dead")
	for _, v := range []string{"a", "b", "c"} {
		if err := r.Client.RPush(ctx, dead, wire.Envelope([]byte(v), nil)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Client.SAdd(ctx, keys.ListConsumers(key), "dead").Err(); err != nil {
		t.Fatal(err)
	}
	tr := openTestReliableList(t, r.Client, key, source.Policy{}) // Concurrency 0: lots of one
	payloadOf := func(ds []*source.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, string(d.Payload))
		}
		slices.Sort(out)
		return out
	}

	// Open took a: another consumer takes it from here before it is delivered.
	if n, err := r.Client.LLen(ctx, dead).Result(); err != nil || n != 2 {
		t.Fatalf("dead consumer's list holds %d items (%v) after Open, want 2: a lot of one taken", n, err)
	}
	if err := r.Client.Del(ctx, tr.processing).Err(); err != nil {
		t.Fatal(err)
	}
	got := redistest.FetchN(t, tr, 1)
	if p := payloadOf(got); !slices.Equal(p, []string{"a"}) || got[0].Attempt != 2 {
		t.Fatalf("delivered %q attempt %d, want a taken over as attempt 2", p, got[0].Attempt)
	}
	if err := tr.Ack(ctx, got); err == nil {
		t.Fatal("ack of an item gone from the processing list succeeded")
	}

	// The next lot, b: its settlement fails (the item stays in the processing list).
	got = redistest.FetchN(t, tr, 1)
	if p := payloadOf(got); !slices.Equal(p, []string{"b"}) {
		t.Fatalf("delivered %q, want b: the lot of a settled", p)
	}
	tr.settled(io.ErrUnexpectedEOF, got...)

	// c is taken next, and b delivered again by the re-read.
	got = redistest.FetchN(t, tr, 2)
	if p := payloadOf(got); !slices.Equal(p, []string{"b", "c"}) {
		t.Fatalf("delivered %q, want b again and c", p)
	}
	if err := tr.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	outstanding := tr.lot.outstanding()
	tr.mu.Unlock()
	if outstanding != 0 {
		t.Fatalf("%d taken-over items outstanding after every delivery settled, want 0", outstanding)
	}
	if n, err := r.Client.LLen(ctx, tr.processing).Result(); err != nil || n != 0 {
		t.Fatalf("processing list holds %d items (%v), want none", n, err)
	}
}

// A reliable list's heartbeat failing tick after tick is one error line, and its
// recovery one info line: each failure is logged once per occurrence, not per tick.
func TestReliableListHeartbeatFailureIsLoggedOncePerOccurrence(t *testing.T) {
	t.Parallel()
	h := logtest.New()
	k := &listKeeper{env: source.Env{Logger: h.Logger()}}
	ctx, down := context.Background(), errors.New("connection refused")
	for _, err := range []error{down, down, down, nil, nil, down, down} {
		k.beaten(ctx, err)
	}
	if e, i := h.Count(slog.LevelError, ""), h.Count(slog.LevelInfo, ""); e != 2 || i != 1 {
		t.Fatalf("logged %d errors and %d infos, want 2 errors (two outages) and 1 recovery", e, i)
	}
}
