package settle_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// batchRun is an App with one batch-handler mount on a stream, on a fake clock, and a
// way to nudge that clock until a condition holds.
type batchRun struct {
	b     *sourcetest.StreamBundle
	clock *sourcetest.Clock
	app   *settle.App
}

func newBatchRun(t *testing.T, h settle.Handler, opts ...settle.MountOption) *batchRun {
	t.Helper()
	b := sourcetest.SetupStream(t)
	clk := sourcetest.NewClock()
	cfg := b.Config()
	cfg.Test.Clock = clk
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(b.Stream(), h, opts...)
	return &batchRun{b: b, clock: clk, app: app}
}

// nudge advances the clock by step every few milliseconds until done is closed.
func (r *batchRun) nudge(step time.Duration, done <-chan struct{}) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			r.clock.Advance(step)
		}
	}
}

// TestBatchHandlerTimeoutCoversTheBatch: the mount's Timeout bounds the whole batch,
// counted from its first delivery's start: a batch handler that never returns on its
// own has its context cancelled with ErrHandlerTimeout, and every message of the batch
// settles as a failure for it (here at attempt 1, the cap).
func TestBatchHandlerTimeoutCoversTheBatch(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	entered := make(chan struct{})
	h := settle.TypedBatch(2, 100*time.Millisecond, func(ctx context.Context, ms []*settle.Message, vs []int) error {
		close(entered)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	r := newBatchRun(t, h, settle.Concurrency(2), settle.Timeout(time.Second), settle.MaxAttempts(1))
	r.b.Publish(t, 1, nil)
	r.b.Publish(t, 2, nil)
	sourcetest.RunApp(t, r.app)
	select {
	case <-entered:
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("the batch never ran")
	}
	done := make(chan struct{})
	go r.nudge(100*time.Millisecond, done)
	evs := sourcetest.WaitFinals(t, r.b.Rec, 2)
	close(done)
	for _, e := range evs {
		if e.Action != settle.ActionReject || e.Attempt != 1 || !errors.Is(e.HandlerErr, settle.ErrHandlerTimeout) {
			t.Fatalf("got %+v, want each message settled at attempt 1 (its cap) for ErrHandlerTimeout", e)
		}
	}
	if cause := <-causes; !errors.Is(cause, settle.ErrHandlerTimeout) {
		t.Fatalf("the batch's context ended with %v, want ErrHandlerTimeout", cause)
	}
}

// TestABatchGatheringAtAGracefulStopRunsOnceItsLingerPasses: a delivery that started
// and waits in a batch's linger when the App stops is not dropped nor handed back: it
// is a running handler, so the drain lets its batch run once the linger passes, and it
// settles by its outcome before Run returns.
func TestABatchGatheringAtAGracefulStopRunsOnceItsLingerPasses(t *testing.T) {
	t.Parallel()
	const linger = time.Second
	var mu sync.Mutex
	var joined, ran time.Time
	var sizes []int
	entered := make(chan struct{}, 1)
	r := (*batchRun)(nil)
	h := settle.TypedBatch(5, linger, func(_ context.Context, _ []*settle.Message, vs []int) error {
		mu.Lock()
		ran = r.clock.Now()
		sizes = append(sizes, len(vs))
		mu.Unlock()
		return nil
	})
	mark := func(next settle.Handler) settle.Handler {
		return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			mu.Lock()
			joined = r.clock.Now()
			mu.Unlock()
			entered <- struct{}{}
			return next.Handle(ctx, m)
		})
	}
	r = newBatchRun(t, h, settle.Concurrency(5), settle.Use(mark))
	r.b.Publish(t, 1, nil)
	stop := sourcetest.RunApp(t, r.app)
	select {
	case <-entered:
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("the delivery never started")
	}
	done := make(chan struct{})
	go r.nudge(100*time.Millisecond, done)
	err := stop() // a graceful stop while the batch waits for more
	close(done)
	if err != nil {
		t.Fatalf("Run returned %v", err)
	}
	evs := r.b.Rec.Events()
	if len(evs) != 1 || evs[0].Action != settle.ActionAck || evs[0].Attempt != 1 {
		t.Fatalf("got %+v, want the message acked at attempt 1 before Run returned", evs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || sizes[0] != 1 {
		t.Fatalf("batches of %v, want one batch of the one message", sizes)
	}
	if waited := ran.Sub(joined); waited < linger {
		t.Fatalf("the batch ran %s after its first delivery joined, want its linger %s passed first", waited, linger)
	}
}

// TestBatchHandlerOptionsAreRefusedAtStartupWithTheReason: a size below 1, a negative
// linger, a nil func, a Concurrency below the size and a linger not shorter than the
// Timeout are each refused by Validate, naming the option.
func TestBatchHandlerOptionsAreRefusedAtStartupWithTheReason(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ok := func(context.Context, []*settle.Message) error { return nil }
	cases := []struct {
		name string
		h    settle.Handler
		opts []settle.MountOption
		want string
	}{
		{"size 0", settle.HandleBatch(0, time.Second, ok), nil, "size 0"},
		{"negative linger", settle.HandleBatch(2, -time.Second, ok), nil, "must not be negative"},
		{"nil func", settle.HandleBatch(2, time.Second, nil), nil, "batch func is nil"},
		{"nil typed func", settle.TypedBatch[int](2, time.Second, nil), nil, "batch func is nil"},
		{"size above Concurrency", settle.HandleBatch(50, time.Second, ok), nil, "Concurrency(10) is smaller"},
		{"linger not below Timeout", settle.HandleBatch(2, time.Minute, ok), []settle.MountOption{settle.Timeout(time.Minute)}, "Timeout(1m0s) must be longer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			app, err := settle.New(b.Config())
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(b.Stream(), c.h, c.opts...)
			err = app.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate returned %v, want a refusal saying %q", err, c.want)
			}
		})
	}
	app, _ := settle.New(b.Config())
	app.Mount(b.Stream(), settle.HandleBatch(10, time.Second, ok))
	if err := app.Validate(); err != nil {
		t.Fatalf("Validate refused a valid batch handler: %v", err)
	}
}
