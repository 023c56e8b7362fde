package settle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// aheadTransport hands out total deliveries, batch at a time, through Fetch and
// FetchAhead alike (Fetch's second read: one taken-over delivery alone, when taken is
// set), and checks the read-ahead rules as the handler reports its starts and ends.
type aheadTransport struct {
	nopTransport
	batch, total int
	taken        bool
	done         chan struct{} // closed once every delivery was acked

	mu          sync.Mutex
	fetches     int
	given       int
	delivered   int // handed out
	finished    int // handlers returned
	acked       int
	maxHeld     int // the most of delivered − finished at a hand-out
	aheadCalls  int
	aloneNow    bool // the taken-over delivery's handler runs
	takenDone   bool // it has run: nothing more is handed out
	violations  []string
	aheadSignal chan struct{} // a FetchAhead call while aloneNow
	aheadBegun  chan struct{} // closed at the first FetchAhead call
}

func newAheadTransport(batch, total int, taken bool) *aheadTransport {
	return &aheadTransport{batch: batch, total: total, taken: taken, done: make(chan struct{}), aheadSignal: make(chan struct{}, 1), aheadBegun: make(chan struct{})}
}

func (t *aheadTransport) Transport(source.Env) source.Transport { return t }

func (t *aheadTransport) Info() source.Info {
	info := t.nopTransport.Info()
	info.Batch, info.Block = t.batch, 10*time.Millisecond
	return info
}

// give hands out up to most deliveries; t.mu is held.
func (t *aheadTransport) give(most int) []*source.Delivery {
	left := t.total - t.given
	if t.taken {
		left = 0 // handed out until the taken-over delivery has run: reads ahead always find work
		if !t.takenDone {
			left = 1 << 20
		}
	}
	n := min(most, t.batch, left)
	ds := make([]*source.Delivery, n)
	for i := range ds {
		t.given++
		ds[i] = &source.Delivery{Attempt: 1, Headers: map[string]string{}, HasPayload: true, ID: fmt.Sprint(t.given), Key: "ahead", Payload: []byte("p")}
	}
	t.delivered += n
	t.maxHeld = max(t.maxHeld, t.delivered-t.finished)
	return ds
}

func (t *aheadTransport) Fetch(_ context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	t.mu.Lock()
	t.fetches++
	if t.taken && t.fetches == 2 {
		t.delivered++
		t.mu.Unlock()
		select { // the readers ahead are reading: they must stop once this is held
		case <-t.aheadBegun:
		case <-time.After(10 * time.Second):
		}
		return []*source.Delivery{{Attempt: 2, Headers: map[string]string{}, HasPayload: true, ID: "taken", Key: "ahead", Payload: []byte("p"), TakenOver: true, Redelivered: true}}, nil
	}
	ds := t.give(max)
	t.mu.Unlock()
	if len(ds) == 0 {
		time.Sleep(wait) // a read that finds nothing waits its bound, as Redis would
	}
	return ds, nil
}

func (t *aheadTransport) FetchAhead(_ context.Context, max int) ([]*source.Delivery, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.aheadCalls++
	if t.aheadCalls == 1 {
		close(t.aheadBegun)
	}
	if t.aloneNow {
		t.violations = append(t.violations, "a read ahead while the taken-over delivery ran")
		select {
		case t.aheadSignal <- struct{}{}:
		default:
		}
	}
	return t.give(max), nil
}

func (t *aheadTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acked += len(ds)
	if t.acked == t.delivered && (t.taken && t.takenDone || !t.taken && t.acked == t.total) {
		close(t.done)
	}
	return nil
}

// handler reports each start and end; the taken-over delivery's checks that nothing else
// is held while it runs, and waits up to a moment for a read ahead that should not come.
func (t *aheadTransport) handler() HandlerFunc {
	return func(_ context.Context, msg *Message) error {
		if msg.ID == "taken" {
			t.mu.Lock()
			if held := t.delivered - t.finished; held != 1 {
				t.violations = append(t.violations, fmt.Sprintf("%d deliveries held when the taken-over one started, want it alone", held))
			}
			t.aloneNow = true
			t.mu.Unlock()
			select {
			case <-t.aheadSignal:
			case <-time.After(50 * time.Millisecond): // long enough for a read ahead to show
			}
			t.mu.Lock()
			if held := t.delivered - t.finished; held != 1 {
				t.violations = append(t.violations, fmt.Sprintf("%d deliveries held when the taken-over one ended, want it alone", held))
			}
			t.aloneNow, t.takenDone = false, true
			t.mu.Unlock()
		}
		t.mu.Lock()
		t.finished++
		t.mu.Unlock()
		return nil
	}
}

// runAhead runs an App with one mount on t until every delivery is acked.
func runAhead(tb testing.TB, t *aheadTransport, opts ...MountOption) {
	tb.Helper()
	a, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	a.Mount(t, t.handler(), opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		t.mu.Lock()
		tb.Errorf("only %d of %d acked (the taken-over delivery ran: %t)", t.acked, t.delivered, t.takenDone)
		t.mu.Unlock()
	}
	cancel()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
}

// Reads ahead take their room like the read loop's: the mount never holds more than
// Concurrency running and Prefetch read ahead, however many reads are out.
func TestReadsAheadKeepTheMountWithinConcurrencyPlusPrefetch(t *testing.T) {
	tr := newAheadTransport(2, 3000, false)
	runAhead(t, tr, Concurrency(2), Prefetch(3))
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.maxHeld > 5 {
		t.Errorf("the mount held %d deliveries at once, want at most Concurrency(2) + Prefetch(3)", tr.maxHeld)
	}
	if tr.aheadCalls == 0 {
		t.Error("no read ahead was made: the test proves nothing")
	}
	if tr.acked != tr.total {
		t.Errorf("%d acks for %d deliveries", tr.acked, tr.total)
	}
}

// A taken-over delivery runs alone with readers ahead too: they push nothing from the
// moment the read loop holds it until it has settled, though new work is always there
// (were they not stood down, the mount would never hold the taken-over delivery alone).
func TestReadsAheadStopWhileATakenOverDeliveryRunsAlone(t *testing.T) {
	tr := newAheadTransport(4, 0, true)
	runAhead(t, tr)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, v := range tr.violations {
		t.Error(v)
	}
	if tr.aheadCalls == 0 {
		t.Error("no read ahead was made: the test proves nothing")
	}
}

// countAhead is a source.ReadAhead that hands out max deliveries a call, counting calls.
type countAhead struct{ calls atomic.Int32 }

func (c *countAhead) FetchAhead(_ context.Context, max int) ([]*source.Delivery, error) {
	c.calls.Add(1)
	ds := make([]*source.Delivery, max)
	for i := range ds {
		ds[i] = &source.Delivery{ID: fmt.Sprint(i)}
	}
	return ds, nil
}

// Once the read loop has stood the readers ahead down (a pause, a delivery run alone),
// no read ahead goes out, and the room one took is freed; once it lets them read again,
// they read.
func TestReadsAheadReadNothingOnceStoodDown(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"paused", "alone"} {
		t.Run(name, func(t *testing.T) {
			m := &mount{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			flag := &m.ahead.paused
			if name == "alone" {
				flag = &m.ahead.alone
			}
			slots := make(chan struct{}, 4)
			ra := &countAhead{}
			var pushed int
			push := func(ds []*source.Delivery) { pushed += len(ds) }
			m.ahead.standDown(flag)
			if m.readAhead(ctx, ctx, ra, slots, 2, push) || ra.calls.Load() != 0 || pushed != 0 {
				t.Fatalf("stood down (%s), a read ahead went out: %d calls, %d pushed", name, ra.calls.Load(), pushed)
			}
			if len(slots) != 0 || m.reading.Load() != 0 {
				t.Fatalf("stood down (%s), the read's room stayed taken: %d slots, %d reading", name, len(slots), m.reading.Load())
			}
			flag.Store(false)
			if !m.readAhead(ctx, ctx, ra, slots, 2, push) || ra.calls.Load() != 1 || pushed != 2 || len(slots) != 2 || m.reading.Load() != 0 {
				t.Fatalf("no longer stood down, a full read ahead: %d calls, %d pushed, %d slots held, %d reading; want 1, 2, 2, 0",
					ra.calls.Load(), pushed, len(slots), m.reading.Load())
			}
		})
	}
}
