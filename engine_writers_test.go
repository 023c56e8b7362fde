package settle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// copierWaitBound bounds every wait of these tests: generous, for a loaded machine.
const copierWaitBound = 10 * time.Second

// moverTransport hands out its deliveries, then nothing; it writes moves in batches
// (source.Mover) once gate is closed, failing those of the ids in fail.
type moverTransport struct {
	nopTransport
	gate    chan struct{}
	entered chan struct{} // closed when Moves is first called
	fail    map[string]bool
	// hold, when set, keeps each Moves call that long after the gate, or until Close:
	// room for a Run that would not wait for its copies to close the transport first.
	hold   time.Duration
	closed chan struct{}

	enter       sync.Once
	mu          sync.Mutex
	pending     []*source.Delivery
	written     []string // ids whose move was written, in order
	calls       []int    // the number of moves of each Moves call, as it began
	closedAfter int      // len(written) when Close was called; -1 before
}

func newMoverTransport(ids ...string) *moverTransport {
	t := &moverTransport{gate: make(chan struct{}), fail: map[string]bool{}, closed: make(chan struct{}), closedAfter: -1, entered: make(chan struct{})}
	for _, id := range ids {
		t.pending = append(t.pending, &source.Delivery{Attempt: 1, Headers: map[string]string{}, HasPayload: true, ID: id, Key: "movers", Payload: []byte(id)})
	}
	return t
}

func (t *moverTransport) Transport(source.Env) source.Transport { return t }

func (t *moverTransport) Info() source.Info {
	info := t.nopTransport.Info()
	info.BatchesMoves, info.Block = true, 10*time.Millisecond
	return info
}

func (t *moverTransport) Fetch(_ context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	t.mu.Lock()
	n := min(max, len(t.pending))
	ds := slices.Clone(t.pending[:n])
	t.pending = t.pending[n:]
	t.mu.Unlock()
	if n == 0 {
		time.Sleep(wait) // a read that finds nothing waits its bound, as Redis would
	}
	return ds, nil
}

func (t *moverTransport) Moves(_ context.Context, ms []source.Move) []error {
	t.mu.Lock()
	t.calls = append(t.calls, len(ms))
	t.mu.Unlock()
	t.enter.Do(func() { close(t.entered) })
	<-t.gate
	if t.hold > 0 {
		select {
		case <-t.closed:
		case <-time.After(t.hold):
		}
	}
	errs := make([]error, len(ms))
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, m := range ms {
		if t.fail[m.Delivery.ID] {
			errs[i] = errors.New("refused: " + m.Delivery.ID)
			continue
		}
		t.written = append(t.written, m.Delivery.ID)
	}
	return errs
}

func (t *moverTransport) Close(context.Context) error {
	t.mu.Lock()
	t.closedAfter = len(t.written)
	t.mu.Unlock()
	close(t.closed)
	return nil
}

func (t *moverTransport) wasWritten(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.written, id)
}

// settledEvent is a reported settlement and whether its move was written by then.
type settledEvent struct {
	ev      Settled
	written bool
}

// runMovers runs an App with one mount on t (handler h, Concurrency(n)), reporting each
// settlement on the returned channel; cancel ends the run, done is closed when Run returned.
func runMovers(tb testing.TB, t *moverTransport, n int, h HandlerFunc) (evs chan settledEvent, cancel context.CancelFunc, done chan error) {
	tb.Helper()
	evs = make(chan settledEvent, 16)
	a, err := New(Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnSettled: func(_ context.Context, s Settled) {
			evs <- settledEvent{ev: s, written: t.wasWritten(s.ID)}
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	a.Mount(t, h, Concurrency(n), Prefetch(0)) // a slot per handler: a held write keeps the next read out
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	finished := make(chan struct{})
	go func() { done <- a.Run(ctx); close(finished) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-t.gate:
		default:
			close(t.gate)
		}
		<-finished
	})
	return evs, cancel, done
}

func nextSettled(tb testing.TB, evs chan settledEvent, what string) settledEvent {
	tb.Helper()
	select {
	case e := <-evs:
		return e
	case <-time.After(copierWaitBound):
		tb.Fatalf("no settlement reported: %s", what)
		return settledEvent{}
	}
}

// A retry copy is queued for the transport's batched writer and reported (OnSettled)
// only once the transport has written it, with its own error only; its slot stays taken
// until then, so that the read loop reads no more than when handlers waited for their
// writes.
func TestRetryCopyIsReportedOnceWrittenAndHoldsItsSlotUntilThen(t *testing.T) {
	t.Parallel()
	tr := newMoverTransport("1-0", "2-0", "3-0")
	tr.fail["3-0"] = true
	var mu sync.Mutex
	var handled []string
	evs, _, _ := runMovers(t, tr, 1, func(_ context.Context, m *Message) error {
		mu.Lock()
		handled = append(handled, m.ID)
		mu.Unlock()
		if m.ID == "2-0" {
			return nil
		}
		return Retry(errors.New("again"))
	})
	select {
	case <-tr.entered:
	case <-time.After(copierWaitBound):
		t.Fatal("the copy of 1-0 was never handed to the transport")
	}
	select {
	case e := <-evs:
		t.Fatalf("%+v reported before the copy of 1-0 was written", e.ev)
	default:
	}
	mu.Lock()
	if !slices.Equal(handled, []string{"1-0"}) {
		t.Fatalf("handled %v while the copy of 1-0 was being written with Concurrency(1); want only 1-0", handled)
	}
	mu.Unlock()
	close(tr.gate)
	if e := nextSettled(t, evs, "the copy of 1-0"); e.ev.ID != "1-0" || e.ev.Action != ActionCopy || e.ev.Err != nil || !e.written {
		t.Fatalf("first report %+v (written by then: %v), want the applied copy of 1-0, written", e.ev, e.written)
	}
	got := map[string]settledEvent{}
	for range 2 {
		e := nextSettled(t, evs, "the ack of 2-0 and the copy of 3-0")
		got[e.ev.ID] = e
	}
	if e := got["2-0"]; e.ev.Action != ActionAck || e.ev.Err != nil {
		t.Fatalf("2-0 reported %+v, want its ack", e.ev)
	}
	if e := got["3-0"]; e.ev.Action != ActionCopy || e.ev.Err == nil || e.ev.Err.Error() != "refused: 3-0" || e.written {
		t.Fatalf("3-0 reported %+v (written: %v), want its copy with its own refusal", e.ev, e.written)
	}
}

// Run writes and reports every queued copy before it closes the transport and returns,
// as it does for acks.
func TestRunWritesAndReportsQueuedCopiesBeforeReturning(t *testing.T) {
	t.Parallel()
	ids := []string{"1-0", "2-0", "3-0"}
	tr := newMoverTransport(ids...)
	tr.hold = time.Second
	var handled sync.WaitGroup
	handled.Add(len(ids))
	evs, cancel, done := runMovers(t, tr, len(ids), func(context.Context, *Message) error {
		defer handled.Done()
		return Retry(errors.New("again"))
	})
	returned := make(chan struct{})
	go func() { handled.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(copierWaitBound):
		t.Fatal("the handlers did not return while their copies waited to be written")
	}
	cancel()
	close(tr.gate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(copierWaitBound):
		t.Fatal("Run did not return")
	}
	close(evs)
	var reported []string
	for e := range evs {
		if e.ev.Action != ActionCopy || e.ev.Err != nil || !e.written {
			t.Fatalf("reported %+v (written by then: %v), want an applied copy, written", e.ev, e.written)
		}
		reported = append(reported, e.ev.ID)
	}
	slices.Sort(reported)
	if !slices.Equal(reported, ids) {
		t.Fatalf("copies reported before Run returned: %v, want %v", reported, ids)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closedAfter != len(ids) {
		t.Fatalf("transport closed after %d of %d copies were written", tr.closedAfter, len(ids))
	}
}

// In-process delays that come due together are written together: the copies due while
// one Moves call is under way go in the next, each reported on its own once written.
func TestDueInProcessCopiesAreWrittenInBatches(t *testing.T) {
	t.Parallel()
	ids := []string{"1-0", "2-0", "3-0", "4-0", "5-0"}
	tr := newMoverTransport(ids...)
	evs := make(chan Settled, 2*len(ids))
	a, err := New(Config{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnSettled: func(_ context.Context, s Settled) { evs <- s },
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Mount(tr, HandlerFunc(func(context.Context, *Message) error {
		return RetryAfter(time.Millisecond, nil)
	}), Concurrency(len(ids)), DelayIn(delayed.InProcess{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tr.gate:
		default:
			close(tr.gate)
		}
		<-done
	})

	select {
	case <-tr.entered:
	case <-time.After(copierWaitBound):
		t.Fatal("no Moves call for the due copies")
	}
	// The first call is held: the other copies queue meanwhile.
	w := a.mounts[0].due
	for deadline := time.Now().Add(copierWaitBound); time.Now().Before(deadline); runtime.Gosched() {
		tr.mu.Lock()
		first := tr.calls[0]
		tr.mu.Unlock()
		w.mu.Lock()
		queued := len(w.queue)
		w.mu.Unlock()
		if first+queued == len(ids) {
			break
		}
	}
	close(tr.gate)
	parks, copies := 0, 0
	for range 2 * len(ids) {
		switch e := nextEvent(t, evs); {
		case e.Action == ActionPark:
			parks++
		case e.Action == ActionCopy && e.Err == nil:
			copies++
		default:
			t.Fatalf("settlement %+v, want a park, then its due copy written", e)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if parks != len(ids) || copies != len(ids) || len(tr.written) != len(ids) || len(tr.calls) > 2 {
		t.Fatalf("%d parks, %d copies reported; moves written %v in calls %v: want all %d copies in at most two calls (those due first, then those due meanwhile)", parks, copies, tr.written, tr.calls, len(ids))
	}
}

func nextEvent(tb testing.TB, evs chan Settled) Settled {
	tb.Helper()
	select {
	case e := <-evs:
		return e
	case <-time.After(copierWaitBound):
		tb.Fatal("no settlement reported")
		return Settled{}
	}
}

// An ack takes a shorter path when debug logging is off; the settlement it reports must
// be the one the full path reports.
func TestAckReportsTheSameSettlementWithDebugOnAndOff(t *testing.T) {
	t.Parallel()
	settledAt := func(level slog.Level) []Settled {
		var mu sync.Mutex
		var got []Settled
		a, err := New(Config{
			Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level})),
			OnSettled: func(_ context.Context, s Settled) {
				mu.Lock()
				got = append(got, s)
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		m := &mount{cfg: defaultMountConfig(), handler: HandlerFunc(func(context.Context, *Message) error { return nil }), src: benchSource{}}
		m.cfg.delay = delayed.InProcess{}
		m.prepare(a.eng)
		acks := newAcker(context.Background(), m)
		d := &source.Delivery{Attempt: 2, Headers: map[string]string{}, HasPayload: true, ID: "7-0", Key: "orders", Payload: []byte("p")}
		m.handle(context.Background(), d, acks, nil, nil)
		acks.close()
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	fast, full := settledAt(slog.LevelError), settledAt(slog.LevelDebug)
	if len(fast) != 1 || len(full) != 1 {
		t.Fatalf("settlements: %d without debug, %d with; want one each", len(fast), len(full))
	}
	untimed := func(s Settled) Settled {
		s.HandlerDuration, s.SettleDuration, s.handled, s.written, s.ctx = 0, 0, time.Time{}, time.Time{}, nil
		return s
	}
	if untimed(fast[0]) != untimed(full[0]) {
		t.Fatalf("without debug %+v, with debug %+v; want the same", fast[0], full[0])
	}
	if want := (Settled{Action: ActionAck, Attempt: 2, ID: "7-0", Key: "orders", MessageKey: "7-0", Mount: "stream bench", Outcome: OutcomeAck, Transport: "stream"}); untimed(fast[0]) != want {
		t.Fatalf("ack reported %+v, want %+v", fast[0], want)
	}
}

// A settlement write's context carries the run context's values, no cancellation, and
// a deadline settleTimeout away, give or take the second its context is shared for.
func TestWriteContextsBoundEachWriteBySettleTimeoutWithoutCancellation(t *testing.T) {
	t.Parallel()
	type key struct{}
	run, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "run"))
	w := &writeContexts{base: context.WithoutCancel(run)}
	for range 3 {
		before := time.Now()
		ctx := w.get()
		after := time.Now()
		deadline, ok := ctx.Deadline()
		if !ok || deadline.Before(before.Add(settleTimeout-time.Second)) || deadline.After(after.Add(settleTimeout)) {
			t.Fatalf("deadline %v (set: %v), want within a second before %v", deadline, ok, after.Add(settleTimeout))
		}
		if ctx.Value(key{}) != "run" {
			t.Fatal("the run context's values are lost")
		}
	}
	cancel()
	if err := w.get().Err(); err != nil {
		t.Fatalf("a write's context ended with the run's: %v", err)
	}
}

// ackCounter hands out its deliveries, then nothing, and counts its Ack calls.
type ackCounter struct {
	moverTransport
	acks atomic.Int32
}

func (t *ackCounter) Transport(source.Env) source.Transport { return t }

func (t *ackCounter) Info() source.Info {
	info := t.moverTransport.Info()
	info.Batch = 100
	return info
}

func (t *ackCounter) Ack(context.Context, []*source.Delivery) error {
	t.acks.Add(1)
	return nil
}

// A single handler acking as fast as it runs has its acks gathered while the rest of
// its read waits (the acker lingers while other deliveries are held): 300 deliveries
// handled 50µs each with Concurrency(1) cost about one Ack call per millisecond, not
// one per delivery (an Ack that answers at once would otherwise be sent for each).
func TestOneHandlerAcksInBatchesNotOneByOne(t *testing.T) {
	t.Parallel()
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("%d-0", i+1)
	}
	tr := &ackCounter{moverTransport: *newMoverTransport(ids...)}
	close(tr.gate)
	var acked atomic.Int32
	done := make(chan struct{})
	a, err := New(Config{Logger: slog.New(slog.DiscardHandler), OnSettled: func(context.Context, Settled) {
		if acked.Add(1) == int32(len(ids)) {
			close(done)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	a.Mount(tr, HandlerFunc(func(context.Context, *Message) error {
		for start := time.Now(); time.Since(start) < 50*time.Microsecond; { // the handler's work, slower than an Ack
		}
		return nil
	}), Concurrency(1))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(copierWaitBound):
		t.Fatal("not every delivery was acked")
	}
	cancel()
	<-ran
	if n := tr.acks.Load(); n > 50 {
		t.Fatalf("%d Ack calls for %d deliveries, want at most 50", n, len(ids))
	}
}

// A ReliableList mount's retry copies and dead letters go to the engine's copier, which
// writes those queued at the same time in one Moves call (one script call), with at
// most copyWriters calls out at once.
func TestReliableListRetryCopiesAndDeadLettersGoThroughMovesInBatches(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key, dlq := r.Key("in"), r.Key("dlq")
	const n = 8
	var a *App
	var queued atomic.Bool // every copy was in a call or queued in the copier while the first call was held
	h := &redistest.ListMoveCalls{Processing: keys.ListProcessing(key, "c1")}
	inCalls := func() (sum int) {
		for _, c := range h.Recorded() {
			sum += c
		}
		return sum
	}
	h.Hold = func() {
		// The first copies are being written: wait for the other handlers' copies to
		// queue (the copier's other writers may take some meanwhile: each such call
		// is recorded, then waits for this one).
		copies := a.mounts[0].copies
		if copies == nil {
			return // not a source.Mover: the test fails below
		}
		for deadline := time.Now().Add(10 * time.Second); inCalls()+copies.q.waiting() < n && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		queued.Store(inCalls()+copies.q.waiting() == n)
	}
	client := r.Hooked(t, h)
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
	calls := h.Recorded()
	moves, firstCalls := 0, 0 // the calls that carried the first attempt's copies
	for _, c := range calls {
		if moves < n {
			firstCalls++
		}
		moves += c
	}
	if !queued.Load() || moves != 2*n || firstCalls > copyWriters {
		t.Fatalf("script calls %+v, want %d moves through the copier (source.Mover), the first %d copies in at most %d calls: those queued first, then those queued meanwhile", calls, 2*n, n, copyWriters)
	}
	if l, err := r.Client.LLen(context.Background(), dlq).Result(); err != nil || l != n {
		t.Fatalf("dead letters %d, %v; want %d", l, err, n)
	}
}

// rereadTransport hands out one delivery. Its first Ack fails and, as a stream does
// after a failed write (it re-reads its own pending entries), it hands the entry out
// again at once, before that Ack returns: the Ack returns once a handler ran a second
// time, or once the read loop waits for the Ack at its barrier (barred).
type rereadTransport struct {
	nopTransport
	rerun  chan struct{} // closed by the test's handler when it runs a second time
	barred func() bool   // whether the read loop waits at mount.settlingBarrier

	mu      sync.Mutex
	pending []*source.Delivery
	acks    int
}

func (t *rereadTransport) Transport(source.Env) source.Transport { return t }

func (t *rereadTransport) Info() source.Info {
	info := t.nopTransport.Info()
	info.Block = 10 * time.Millisecond
	return info
}

func (t *rereadTransport) Fetch(ctx context.Context, _ int, wait time.Duration) ([]*source.Delivery, error) {
	t.mu.Lock()
	ds := t.pending
	t.pending = nil
	t.mu.Unlock()
	if len(ds) == 0 {
		select { // a read that finds nothing waits its bound, as Redis would
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return ds, nil
}

func (t *rereadTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	t.mu.Lock()
	t.acks++
	first := t.acks == 1
	if first {
		again := *ds[0]
		again.Attempt, again.Redelivered = 2, true
		t.pending = append(t.pending, &again)
	}
	t.mu.Unlock()
	if !first {
		return nil
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(copierWaitBound); time.Now().Before(deadline) && !t.barred(); {
		select {
		case <-t.rerun:
			return errors.New("connection refused")
		case <-tick.C:
		}
	}
	return errors.New("connection refused")
}

// A delivery read again because its ack failed is handed to a worker only once the
// engine recorded the failure: its ack is written again and its handler does not run
// again, even when the transport re-reads it before its failed Ack has returned.
func TestADeliveryReadAgainBeforeItsFailedAckReturnedHasItsAckWrittenAgainNotItsHandlerRun(t *testing.T) {
	t.Parallel()
	tr := &rereadTransport{rerun: make(chan struct{}), pending: []*source.Delivery{
		{Attempt: 1, Headers: map[string]string{}, HasPayload: true, ID: "1-0", Key: "reread", Payload: []byte("x")},
	}}
	acked := make(chan Settled, 1)
	a, err := New(Config{Logger: slog.New(slog.DiscardHandler), OnSettled: func(_ context.Context, s Settled) {
		if s.Err == nil {
			acked <- s
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	a.Mount(tr, HandlerFunc(func(context.Context, *Message) error {
		if runs.Add(1) == 2 {
			close(tr.rerun)
		}
		return nil
	}))
	m := a.mounts[0]
	tr.barred = func() bool {
		// The Ack holds the lock for reading: it cannot be had for reading again only
		// while the read loop waits to take it for writing.
		if m.settling.TryRLock() {
			m.settling.RUnlock()
			return false
		}
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	select {
	case s := <-acked:
		if s.Attempt != 1 {
			t.Errorf("the ack written was of attempt %d, want 1 (the run whose ack failed)", s.Attempt)
		}
	case <-time.After(copierWaitBound):
		t.Fatal("no ack was applied")
	}
	cancel()
	<-ran
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1: the delivery read again was to have its failed ack written again", n)
	}
}
