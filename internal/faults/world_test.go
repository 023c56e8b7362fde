package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/faults"
	"github.com/settlekit/settle/internal/ledger"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/wire"
)

// headerID carries a message's own id.
const headerID = "fault-id"

// maxAttempts is the cap of every scenario's mount.
const maxAttempts = 3

// bound bounds every wait of these tests; it is never slept.
const bound = 30 * time.Second

// transport is one subscription kind under faults.
type transport struct {
	name     string
	claiming bool // ClaimingStream
	list     bool // ReliableList
	reclaim  bool // Stream + Reclaim
}

// transports are the subscriptions every scenario runs on.
var transports = []transport{
	{name: "Stream"},
	{name: "StreamReclaim", reclaim: true},
	{name: "ClaimingStream", claiming: true},
	{name: "ReliableList", list: true},
}

// world is one scenario's run: a Redis, a proxy in front of it, the App's client through
// the proxy, and the ledger every run and settlement is written to.
type world struct {
	block  time.Duration
	client *redis.Client // the App's: through the proxy
	dlq    string
	in     string
	ledger string
	proxy  *faults.Proxy
	r      *redistest.Redis
	t      *testing.T
	tr     transport
	w      *ledger.Writer

	ended    chan struct{} // closed when Run returned
	runErr   error         // what Run returned, once ended is closed
	ids      sync.Map      // delivery/attempt -> message id, until settled
	progress chan struct{}
	settled  atomic.Int64 // settlements reported, failed ones included
	failed   atomic.Int64 // settlements that failed to apply
}

func setupWorld(t *testing.T, tr transport, block time.Duration) *world {
	t.Helper()
	r := redistest.New(t)
	o := r.Client.Options()
	p := faults.Start(t, o.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: o.DB, Password: o.Password, Username: o.Username})
	t.Cleanup(func() { _ = c.Close() })
	path := filepath.Join(t.TempDir(), "ledger")
	lw, err := ledger.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lw.Close() })
	return &world{
		block: block, client: c, dlq: r.Key("dlq"), ended: make(chan struct{}), in: r.Key("in"), ledger: path,
		progress: make(chan struct{}, 1), proxy: p, r: r, t: t, tr: tr, w: lw,
	}
}

// publish publishes n messages with the test's own client (not through the proxy).
func (w *world) publish(n int) {
	w.t.Helper()
	ctx := context.Background()
	pub := settle.NewPublisher(w.r.Client)
	for i := range n {
		id := "m" + strconv.Itoa(i)
		if err := w.w.Publish(id); err != nil {
			w.t.Fatal(err)
		}
		h := map[string]string{headerID: id}
		var err error
		if w.tr.list {
			err = pub.PublishListBytes(ctx, w.in, []byte(id), settle.Headers(h))
		} else {
			_, err = pub.PublishBytes(ctx, w.in, []byte(id), settle.Headers(h))
		}
		if err != nil {
			w.t.Fatal(err)
		}
	}
}

// source is the scenario's subscription, on the proxied client.
func (w *world) source() settle.Source {
	block := settle.Block(w.block)
	switch {
	case w.tr.list:
		return settle.ReliableList(w.client, w.in, settle.Consumer("c1"), settle.Heartbeat(time.Second), block)
	case w.tr.claiming:
		return settle.ClaimingStream(w.client, w.in, "g", 150*time.Millisecond, settle.Consumer("c1"), block)
	case w.tr.reclaim:
		return settle.Stream(w.client, w.in, "g", settle.Consumer("c1"), settle.Reclaim(500*time.Millisecond), block)
	}
	return settle.Stream(w.client, w.in, "g", settle.Consumer("c1"), block)
}

// run publishes n messages, runs an App on them while inject injects faults (it returns
// how many it injected, once it is done), waits for the drain, stops the App and judges
// the ledger. It fails the test if a goroutine the App started outlives its Run.
func (w *world) run(n int, inject func(w *world) int) ledger.Report {
	t := w.t
	t.Helper()
	w.publish(n)
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Action == settle.ActionPark {
				// An in-process delay is reported once scheduled; its settlement is the
				// copy written when it comes due (reported again, as a copy).
				return
			}
			id := ""
			if v, ok := w.ids.LoadAndDelete(settleKey(s.ID, s.Attempt)); ok {
				id = v.(string)
			}
			if err := w.w.Settle(id, s.Attempt, s.ID, s.Action.String(), s.Err); err != nil {
				panic(err)
			}
			if s.Err != nil {
				w.failed.Add(1)
			}
			w.settled.Add(1)
			select {
			case w.progress <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(w.source(), settle.HandlerFunc(handle), settle.Use(w.record), settle.MaxAttempts(maxAttempts),
		settle.DeadLetter(w.dlq), settle.Concurrency(8))

	label := fmt.Sprintf("%s-%p", t.Name(), w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pprof.Do(ctx, pprof.Labels("faults-app", label), func(ctx context.Context) {
		w.runErr = app.Run(ctx)
		close(w.ended)
	})

	injected := inject(w)
	if injected == 0 {
		t.Fatal("the scenario injected no fault")
	}
	w.waitDrained()
	cancel()
	select {
	case <-w.ended:
		if w.runErr != nil {
			t.Fatalf("Run: %v", w.runErr)
		}
	case <-time.After(bound):
		t.Fatalf("Run did not return within %s of its cancel", bound)
	}
	noGoroutineLabelled(t, label)
	if ok, err := w.drained(context.Background()); err != nil || !ok {
		t.Fatalf("not drained after Run returned: %v\n%s", err, w.describe())
	}

	evs, err := ledger.Read(w.ledger)
	if err != nil {
		t.Fatal(err)
	}
	rep := ledger.Check(ledger.Input{Events: evs, Dead: w.dead(), MaxAttempts: maxAttempts, RepliesLost: true}) // the proxy cuts replies
	t.Logf("%s: %d faults injected; %s", w.tr.name, injected, rep)
	if !rep.OK() {
		ps := rep.Problems
		if len(ps) > 20 {
			ps = ps[:20]
		}
		t.Fatalf("the ledger does not hold: %s\n%s", rep, strings.Join(ps, "\n"))
	}
	if rep.Published != n {
		t.Fatalf("published %d, want %d", rep.Published, n)
	}
	return rep
}

// record is the middleware writing each run and its outcome to the ledger.
func (w *world) record(next settle.Handler) settle.Handler {
	return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		id := m.Headers[headerID]
		w.ids.Store(settleKey(m.ID, m.Attempt), id)
		if err := w.w.Run(id, m.Attempt, m.ID); err != nil {
			panic(err)
		}
		err := next.Handle(ctx, m)
		if err := w.w.Outcome(id, m.Attempt, m.ID, string(settle.OutcomeOf(err).Kind)); err != nil {
			panic(err)
		}
		return err
	})
}

func settleKey(delivery string, attempt int) string { return delivery + "/" + strconv.Itoa(attempt) }

// handle answers a delivery as a pure function of the message and the attempt: 5% of
// messages always fail (dead-lettered at the cap); otherwise an attempt retries 15% of
// the time, retries after 5-20ms 10%, drops 3% and acks the rest.
func handle(_ context.Context, m *settle.Message) error {
	id := m.Headers[headerID]
	if unit(id, -1) < 0.05 {
		return errors.New("faults: this message always fails")
	}
	switch u := unit(id, m.Attempt); {
	case u < 0.15:
		return settle.Retry(errors.New("faults: retry"))
	case u < 0.25:
		return settle.RetryAfter(5*time.Millisecond+time.Duration(unit(id, m.Attempt+100)*float64(15*time.Millisecond)), errors.New("faults: retry after"))
	case u < 0.28:
		return settle.Drop(errors.New("faults: drop"))
	}
	return nil
}

// unit maps (id, n) to [0, 1).
func unit(id string, n int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", id, n)
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(1<<53)
}

// waitSettled waits until at least n settlements were reported.
func (w *world) waitSettled(n int64) {
	w.t.Helper()
	deadline := time.After(bound)
	for w.settled.Load() < n {
		select {
		case <-w.progress:
		case <-w.ended:
			w.t.Fatalf("Run returned before %d settlements: %v", n, w.runErr)
		case <-deadline:
			w.t.Fatalf("%d settlements after %s, want %d", w.settled.Load(), bound, n)
		}
	}
}

// waitDrained polls the server (not through the proxy) until nothing is left to
// deliver, pending or delayed.
func (w *world) waitDrained() {
	w.t.Helper()
	ctx := context.Background()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(bound)
	for {
		ok, err := w.drained(ctx)
		if err != nil {
			w.t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-w.ended:
			w.t.Fatalf("Run returned before the drain: %v", w.runErr)
		case <-deadline:
			evs, _ := ledger.Read(w.ledger)
			rep := ledger.Check(ledger.Input{Events: evs, Dead: w.dead(), MaxAttempts: maxAttempts, RepliesLost: true}) // the proxy cuts replies
			w.t.Fatalf("not drained within %s; %s\n%s", bound, rep, strings.Join(rep.Problems[:min(len(rep.Problems), 10)], "\n"))
		}
	}
}

// drained reports whether the subscription has nothing left: the list and the
// consumer's processing list are empty, or the group has read every entry and has none
// pending.
func (w *world) drained(ctx context.Context) (bool, error) {
	rdb := w.r.Client
	// One MULTI/EXEC: read apart, a retry copy written between the two reads (its
	// original acked, the copy not yet delivered) would look drained.
	if w.tr.list {
		var list, processing *redis.IntCmd
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			list = p.LLen(ctx, w.in)
			processing = p.LLen(ctx, settle.ProcessingList(w.in, "c1"))
			return nil
		}); err != nil {
			return false, err
		}
		return list.Val() == 0 && processing.Val() == 0, nil
	}
	var infoCmd *redis.XInfoStreamCmd
	var groupsCmd *redis.XInfoGroupsCmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		infoCmd = p.XInfoStream(ctx, w.in)
		groupsCmd = p.XInfoGroups(ctx, w.in)
		return nil
	}); err != nil {
		return false, err
	}
	info, groups := infoCmd.Val(), groupsCmd.Val()
	for _, g := range groups {
		if g.Name == "g" {
			return g.Pending == 0 && g.LastDeliveredID == info.LastGeneratedID, nil
		}
	}
	return false, nil
}

// describe reports what the transport holds (for a failure message): the stream's last
// entries and the group's pending entries, or the lists' lengths, and the ledger's verdict.
func (w *world) describe() string {
	ctx := context.Background()
	rdb := w.r.Client
	var b strings.Builder
	if w.tr.list {
		in, _ := rdb.LLen(ctx, w.in).Result()
		proc, _ := rdb.LLen(ctx, settle.ProcessingList(w.in, "c1")).Result()
		fmt.Fprintf(&b, "list %d, processing list %d\n", in, proc)
	} else {
		info, err := rdb.XInfoStream(ctx, w.in).Result()
		fmt.Fprintf(&b, "stream: length %d, last generated %s (%v)\n", info.Length, info.LastGeneratedID, err)
		groups, err := rdb.XInfoGroups(ctx, w.in).Result()
		fmt.Fprintf(&b, "groups: %+v (%v)\n", groups, err)
		pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: w.in, Group: "g", Start: "-", End: "+", Count: 20}).Result()
		fmt.Fprintf(&b, "pending: %+v (%v)\n", pending, err)
		last, err := rdb.XRevRangeN(ctx, w.in, "+", "-", 3).Result()
		fmt.Fprintf(&b, "last entries: %+v (%v)\n", last, err)
	}
	if evs, err := ledger.Read(w.ledger); err == nil {
		rep := ledger.Check(ledger.Input{Events: evs, Dead: w.dead(), MaxAttempts: maxAttempts, RepliesLost: true})
		fmt.Fprintf(&b, "ledger: %s\n%s", rep, strings.Join(rep.Problems[:min(len(rep.Problems), 10)], "\n"))
	}
	return b.String()
}

// dead reads the dead letters.
func (w *world) dead() []ledger.Dead {
	w.t.Helper()
	ctx := context.Background()
	var out []ledger.Dead
	if w.tr.list {
		vals, err := w.r.Client.LRange(ctx, w.dlq, 0, -1).Result()
		if err != nil {
			w.t.Fatal(err)
		}
		for _, v := range vals {
			_, headers, _, err := wire.FromEnvelope([]byte(v))
			if err != nil {
				w.t.Fatalf("dead letter %q: %v", v, err)
			}
			out = append(out, deadOf(headers))
		}
		return out
	}
	msgs, err := w.r.Client.XRange(ctx, w.dlq, "-", "+").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, m := range msgs {
		_, _, headers := wire.FromStream(m.Values)
		out = append(out, deadOf(headers))
	}
	return out
}

func deadOf(headers map[string]string) ledger.Dead {
	n, _ := strconv.Atoi(headers[settle.HeaderRetryCount])
	return ledger.Dead{Attempt: n, Delivery: headers[settle.HeaderDeadID], ID: headers[headerID]}
}

// noGoroutineLabelled fails t if a goroutine carrying the profiler label of an App's
// Run (inherited by every goroutine it started) is still alive: waits briefly for
// goroutines that are past their last statement.
func noGoroutineLabelled(t *testing.T, label string) {
	t.Helper()
	want := []byte(`"faults-app":"` + label + `"`)
	deadline := time.Now().Add(2 * time.Second)
	for {
		var buf bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(buf.Bytes(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines started by Run outlived it:\n%s", labelledStacks(buf.String(), string(want)))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded
	}
}

// labelledStacks returns the profile records that carry want.
func labelledStacks(profile, want string) string {
	var out []string
	for _, rec := range strings.Split(profile, "\n\n") {
		if strings.Contains(rec, want) {
			out = append(out, rec)
		}
	}
	return strings.Join(out, "\n\n")
}
