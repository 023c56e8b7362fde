package settle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestOrderedIsRefusedWhereItCannotHold: Ordered stops startup, naming why, on a source
// that cannot keep a key's messages in order (a List pop, a ReliableList, PubSub, a
// ClaimingStream whose retries wait as idle entries any consumer claims), on a Stream
// without one Consumer name, with HandleBatch and with a flow limit; a Stream under
// Consumer(name) and a PartitionedStream take it.
func TestOrderedIsRefusedWhereItCannotHold(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	app, err := settle.New(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	batch := settle.HandleBatch(10, time.Millisecond, func(context.Context, []*settle.Message) error { return nil })
	key := func(m *settle.Message) string { return m.Headers[settle.HeaderKey] }
	app.Mount(settle.List(b.Client, b.In+":list"), sourcetest.Ack, settle.Name("list"), settle.Ordered())
	app.Mount(settle.ReliableList(b.Client, b.In+":rlist"), sourcetest.Ack, settle.Name("reliable-list"), settle.Ordered())
	app.Mount(settle.PubSub(b.Client, b.In+":ch"), sourcetest.Ack, settle.Name("pubsub"), settle.Ordered())
	app.Mount(settle.ClaimingStream(b.Client, b.In+":claiming", "g", time.Minute), sourcetest.Ack, settle.Name("claiming"), settle.Ordered())
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("no-consumer"), settle.Ordered())
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), batch, settle.Name("batch"), settle.Ordered())
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), sourcetest.Ack, settle.Name("limited"), settle.Ordered(), settle.ConcurrencyBy(key, 1))
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), sourcetest.Ack, settle.Name("stream"), settle.Ordered())
	app.Mount(settle.PartitionedStream(b.Client, strings.Trim(b.In, "{}")+"-parts", "g", settle.Partitions(4)), sourcetest.Ack, settle.Name("partitioned"), settle.Ordered())
	err = app.Validate()
	if err == nil {
		t.Fatal("Validate = nil, want Ordered refused")
	}
	want := map[string]string{
		"list":          "Ordered: refused on a *settle.ListSource",
		"reliable-list": "Ordered: refused on a *settle.ReliableListSource",
		"pubsub":        "Ordered: refused on a *settle.PubSubSource",
		"claiming":      "Ordered: refused on a *settle.ClaimingStreamSource",
		"no-consumer":   "Ordered on a Stream needs Consumer(name)",
		"batch":         "Ordered: refused with HandleBatch",
		"limited":       "Ordered: refused with ConcurrencyBy",
	}
	got := map[string]string{}
	for _, ce := range configErrors(t, err) {
		if strings.Contains(ce.Problem, "Ordered") {
			got[ce.Mount] += ce.Problem + "; "
		}
	}
	for mount, w := range want {
		if !strings.Contains(got[mount], w) {
			t.Errorf("mount %s: refusals %q, want one saying %q", mount, got[mount], w)
		}
	}
	for _, ok := range []string{"stream", "partitioned"} {
		if got[ok] != "" {
			t.Errorf("mount %s: Ordered refused (%s), want it taken", ok, got[ok])
		}
	}
}

// failFirstXAck is a go-redis hook whose first XACK fails (a settlement write that
// does not reach Redis).
type failFirstXAck struct{ done atomic.Bool }

func (h *failFirstXAck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failFirstXAck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xack" && h.done.CompareAndSwap(false, true) {
			err := errors.New("injected: xack lost")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failFirstXAck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOrderedHeadWhoseAckFailedKeepsItsKeyAndIsReadAgainWhileItsKeyFillsTheMount: the
// first ack of a key's head fails while its later messages fill every other slot of
// the mount; the head keeps its key, is read again (a read of what fits: its own slot)
// and settled, then the later messages run in order. Without the short read the mount
// would wait for a full read's room forever.
func TestOrderedHeadWhoseAckFailedKeepsItsKeyAndIsReadAgainWhileItsKeyFillsTheMount(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	rdb := r.Hooked(t, &failFirstXAck{})
	in, group := r.Key("in"), "workers"
	if err := r.Client.XGroupCreateMkStream(context.Background(), in, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(r.Client)
	want := []string{"a1", "a2", "a3", "a4", "a5", "a6"}
	for _, p := range want {
		if _, err := pub.PublishBytes(context.Background(), in, []byte(p), settle.Key("a")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var started []string
	settledIDs := map[string]bool{}
	ids := map[string]string{} // payload -> id
	bad := ""
	rec := sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{OnSettled: func(ctx context.Context, ev settle.Settled) {
		if ev.Err == nil && ev.Final() {
			mu.Lock()
			settledIDs[ev.ID] = true
			mu.Unlock()
		}
		rec.OnSettled(ctx, ev)
	}})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(rdb, in, group, settle.Consumer("c1"), settle.Batch(4), settle.Block(50*time.Millisecond)),
		settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			mu.Lock()
			defer mu.Unlock()
			p := string(m.Payload)
			if i := slices.Index(want, p); i > 0 && !settledIDs[ids[want[i-1]]] {
				bad += p + " started before " + want[i-1] + " had settled; "
			}
			ids[p] = m.ID
			started = append(started, p)
			return nil
		}), settle.Ordered(), settle.Concurrency(2), settle.Prefetch(2))
	stop := sourcetest.StartApp(t, app)
	rec.WaitFor(t, sourcetest.WaitTimeout, "every message acked", func(evs []settle.Settled) bool {
		n := 0
		for _, e := range evs {
			if e.Final() && e.Err == nil {
				n++
			}
		}
		return n == len(want)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != "" {
		t.Fatalf("out of order: %s", bad)
	}
	if !slices.Equal(started, want) {
		t.Fatalf("handler starts %v, want each once in order (the head's failed ack written again without running it)", started)
	}
	failed := 0
	for _, e := range rec.Events() {
		if e.Err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed settlements, want the injected one", failed)
	}
}

// TestOrderedStreamTakesOverAnotherNamesEntryWithoutStalling: under Ordered, an entry
// another consumer name left pending (the documented exception: a second name read the
// stream) is reclaimed and runs alone while the key's later messages are held behind
// heads here; the mount neither stalls nor loses any.
func TestOrderedStreamTakesOverAnotherNamesEntryWithoutStalling(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	in, group := r.Key("in"), "workers"
	ctx := context.Background()
	if err := r.Client.XGroupCreateMkStream(ctx, in, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(r.Client)
	publish := func(p string) {
		if _, err := pub.PublishBytes(ctx, in, []byte(p), settle.Key("a")); err != nil {
			t.Fatal(err)
		}
	}
	publish("a1")
	sourcetest.CrashRead(t, r.Client, in, group, "old", 1)
	for _, p := range []string{"a2", "a3", "a4"} {
		publish(p)
	}
	rec := sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var started []string
	app.Mount(settle.Stream(r.Client, in, group, settle.Consumer("c1"), settle.Reclaim(time.Millisecond), settle.Block(50*time.Millisecond)),
		settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			mu.Lock()
			started = append(started, fmt.Sprintf("%s#%d", m.Payload, m.Attempt))
			mu.Unlock()
			return nil
		}), settle.Ordered(), settle.Concurrency(2))
	stop := sourcetest.StartApp(t, app)
	rec.WaitFor(t, sourcetest.WaitTimeout, "every message acked", func(evs []settle.Settled) bool {
		return sourcetest.Finals(evs) == 4
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(started, "a1#2") || len(started) != 4 {
		t.Fatalf("starts %v, want a1 taken over (attempt 2) and a2..a4 once each", started)
	}
}
