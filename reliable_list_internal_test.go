package settle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// listMoveCalls is a go-redis hook that records how many moves each list_move script
// call on one processing list (EVALSHA whose first key is that list) carried. The first
// call runs hold first, when set.
type listMoveCalls struct {
	hold       func()
	processing string

	mu    sync.Mutex
	calls []int
	once  sync.Once
}

func (h *listMoveCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *listMoveCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if strings.EqualFold(cmd.Name(), "evalsha") && len(args) > 3 && args[3] == h.processing {
			numKeys, _ := args[2].(int)
			h.mu.Lock()
			h.calls = append(h.calls, (len(args)-3-numKeys)/3)
			h.mu.Unlock()
			if h.hold != nil {
				h.once.Do(h.hold)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *listMoveCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *listMoveCalls) recorded() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// openTestReliableList opens a reliable list consumer "c1" of key on client.
func openTestReliableList(t *testing.T, client *redis.Client, key string, policy source.Policy) *reliableTransport {
	t.Helper()
	return openTestTransport[*reliableTransport](t, ReliableList(client, key, Consumer("c1"), Block(50*time.Millisecond)), policy)
}

// pushAndFetchList pushes the values to tr's list (through rdb) and fetches them all.
func pushAndFetchList(t *testing.T, rdb *redis.Client, tr *reliableTransport, values ...string) []*source.Delivery {
	t.Helper()
	ctx := context.Background()
	for _, v := range values {
		if err := rdb.RPush(ctx, tr.src.key, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return fetchN(t, tr, len(values))
}

// hookedClient returns a client of r's server with hook h.
func hookedClient(t *testing.T, r *redistest.Redis, h redis.Hook) *redis.Client {
	t.Helper()
	o := r.Client.Options()
	client := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username})
	client.AddHook(h)
	t.Cleanup(func() { _ = client.Close() })
	return client
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
	h := &listMoveCalls{processing: keys.ListProcessing(key, "c1"), hold: func() { close(entered); <-release }}
	tr := openTestReliableList(t, hookedClient(t, r, h), key, source.Policy{DeadLetter: dlq, Delay: delayed.InProcess{}})
	got := pushAndFetchList(t, r.Client, tr, "a", "b", "c", "d", "e")
	// Another consumer recovers c while its copy is asked for.
	if err := r.Client.LRem(ctx, tr.processing, 1, "c").Err(); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{HeaderRetryCount: "1"}
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
	if calls := h.recorded(); len(calls) != 1 || calls[0] != 5 {
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

// A ReliableList mount's retry copies and dead letters go to the engine's copier, which
// writes those queued at the same time in one Moves call (one script call).
func TestReliableListRetryCopiesAndDeadLettersGoThroughMovesInBatches(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key, dlq := r.Key("in"), r.Key("dlq")
	const n = 8
	var a *App
	var queued atomic.Bool // the other copies were queued in the copier while the first call was held
	h := &listMoveCalls{processing: keys.ListProcessing(key, "c1")}
	h.hold = func() {
		// The first copies are being written: wait for the other handlers' copies to queue.
		first := h.recorded()[0]
		copies := a.mounts[0].copies
		if copies == nil {
			return // not a source.Mover: the test fails below
		}
		for deadline := time.Now().Add(10 * time.Second); len(copies.ch) < n-first && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		queued.Store(len(copies.ch) == n-first)
	}
	client := hookedClient(t, r, h)
	settled := make(chan Settled, 2*n)
	a, err := New(Config{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnSettled: func(_ context.Context, s Settled) { settled <- s },
	})
	if err != nil {
		t.Fatal(err)
	}
	var attempts [3]sync.WaitGroup
	attempts[1].Add(n)
	attempts[2].Add(n)
	a.Mount(ReliableList(client, key, Consumer("c1"), Block(50*time.Millisecond)), HandlerFunc(func(_ context.Context, m *Message) error {
		// Every handler of an attempt returns together.
		attempts[m.Attempt].Done()
		attempts[m.Attempt].Wait()
		return Retry(errors.New("fails"))
	}), Concurrency(n), MaxAttempts(2), DeadLetter(dlq))
	for i := range n {
		if err := r.Client.RPush(context.Background(), key, wire.Envelope([]byte{byte('a' + i)}, nil)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var evs []Settled
	for len(evs) < 2*n {
		select {
		case e := <-settled:
			evs = append(evs, e)
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("%d settlements, want %d", len(evs), 2*n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Err != nil || e.Action != ActionCopy && e.Action != ActionDeadLetter {
			t.Fatalf("settlement %+v, want applied copies and dead letters", e)
		}
	}
	calls := h.recorded()
	moves := 0
	for _, c := range calls {
		moves += c
	}
	if first := calls[0]; !queued.Load() || moves != 2*n || first < n && (len(calls) < 2 || first+calls[1] != n) {
		t.Fatalf("script calls %+v, want %d moves through the copier (source.Mover), the first %d copies in at most two calls: those queued first, then those queued meanwhile", calls, 2*n, n)
	}
	if l, err := r.Client.LLen(context.Background(), dlq).Result(); err != nil || l != n {
		t.Fatalf("dead letters %d, %v; want %d", l, err, n)
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
	got := fetchN(t, tr, 1)
	if p := payloadOf(got); !slices.Equal(p, []string{"a"}) || got[0].Attempt != 2 {
		t.Fatalf("delivered %q attempt %d, want a taken over as attempt 2", p, got[0].Attempt)
	}
	if err := tr.Ack(ctx, got); err == nil {
		t.Fatal("ack of an item gone from the processing list succeeded")
	}

	// The next lot, b: its settlement fails (the item stays in the processing list).
	got = fetchN(t, tr, 1)
	if p := payloadOf(got); !slices.Equal(p, []string{"b"}) {
		t.Fatalf("delivered %q, want b: the lot of a settled", p)
	}
	tr.settled(io.ErrUnexpectedEOF, got...)

	// c is taken next, and b delivered again by the re-read.
	got = fetchN(t, tr, 2)
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
