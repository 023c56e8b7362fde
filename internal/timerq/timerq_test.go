package timerq

import (
	"testing"
	"time"

	"github.com/settlekit/settle/internal/clock"
)

// fakeClock is the tests' fake clock; each timer made reports itself on Made, so a test
// advances only once the queue is waiting on its timer.
type fakeClock = clock.Fake

func newFakeClock() *fakeClock {
	c := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	c.Made = make(chan struct{}, 64)
	return c
}

type testBundle struct {
	clock *fakeClock
	queue *Queue
	ran   chan string
	rest  chan []func()
	stop  chan struct{}
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	c := newFakeClock()
	b := &testBundle{clock: c, queue: New(c), ran: make(chan string, 16), rest: make(chan []func(), 1), stop: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-b.stop:
		default:
			close(b.stop)
			<-b.rest
		}
	})
	return b
}

// schedule schedules a function that reports name when it runs.
func (b *testBundle) schedule(d time.Duration, name string) {
	b.queue.Schedule(d, func() { b.ran <- name })
}

func (b *testBundle) run() {
	go func() { b.rest <- b.queue.Run(b.stop) }()
}

// waitTimer waits until the queue has made a timer to wait on.
func (b *testBundle) waitTimer(t *testing.T) {
	t.Helper()
	select {
	case <-b.clock.Made:
	case <-time.After(5 * time.Second):
		t.Fatal("the queue made no timer")
	}
}

// expect receives the names of the next functions run, in order.
func (b *testBundle) expect(t *testing.T, names ...string) {
	t.Helper()
	for _, want := range names {
		select {
		case got := <-b.ran:
			if got != want {
				t.Fatalf("got %q run, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("timed out waiting for %q to run", want)
		}
	}
}

// stopQueue stops Run and returns the names of the functions it handed back, running
// them.
func (b *testBundle) stopQueue(t *testing.T) []string {
	t.Helper()
	close(b.stop)
	var rest []func()
	select {
	case rest = <-b.rest:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after stop")
	}
	var names []string
	for _, fn := range rest {
		fn()
		names = append(names, <-b.ran)
	}
	return names
}

func TestQueueRunsInDueOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.schedule(30*time.Millisecond, "third")
	b.schedule(10*time.Millisecond, "first")
	b.schedule(20*time.Millisecond, "second")
	b.run()
	b.waitTimer(t)
	b.clock.Advance(30 * time.Millisecond)
	b.expect(t, "first", "second", "third")
	if n := b.queue.Len(); n != 0 {
		t.Fatalf("got %d waiting, want 0", n)
	}
}

func TestQueueEqualDueTimesKeepFIFO(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, name := range []string{"a", "b", "c", "d", "e"} {
		b.schedule(time.Second, name)
	}
	b.run()
	b.waitTimer(t)
	b.clock.Advance(time.Second)
	b.expect(t, "a", "b", "c", "d", "e")
}

func TestQueueRunsNothingBeforeDue(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.schedule(time.Minute, "later")
	b.schedule(time.Second, "soon")
	b.run()
	b.waitTimer(t)
	b.clock.Advance(999 * time.Millisecond)
	if n := b.clock.Pending(); n != 1 {
		t.Fatalf("got %d timers waiting after 999ms, want the queue's one unfired", n)
	}
	// One more millisecond makes "soon" due, and only it.
	b.clock.Advance(time.Millisecond)
	b.expect(t, "soon")
	b.waitTimer(t) // the queue now waits for "later"
	if got := b.stopQueue(t); len(got) != 1 || got[0] != "later" {
		t.Fatalf("got %q handed back, want [later]", got)
	}
}

func TestQueueRunReturnsWaitingFunctionsOnStop(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.schedule(3*time.Hour, "c")
	b.schedule(time.Hour, "a")
	b.schedule(2*time.Hour, "b1")
	b.schedule(2*time.Hour, "b2")
	b.run()
	b.waitTimer(t)
	got := b.stopQueue(t)
	want := []string{"a", "b1", "b2", "c"}
	if len(got) != len(want) {
		t.Fatalf("got %q handed back, want %q in due order", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q handed back, want %q in due order", got, want)
		}
	}
	if n := b.queue.Len(); n != 0 {
		t.Fatalf("got %d still waiting after stop, want 0", n)
	}
}

func TestQueueScheduleWakesIdleRun(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.run()
	b.schedule(0, "now")
	b.expect(t, "now")
}

func TestQueueEarlierScheduleShortensWait(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.schedule(time.Hour, "late")
	b.run()
	b.waitTimer(t)
	b.schedule(time.Second, "early")
	b.waitTimer(t) // woken, it waits again, now for "early"
	b.clock.Advance(time.Second)
	b.expect(t, "early")
	if n := b.queue.Len(); n != 1 {
		t.Fatalf("got %d waiting, want 1 (late)", n)
	}
}

func TestQueueStopWithNothingWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)

	b.run()
	if got := b.stopQueue(t); len(got) != 0 {
		t.Fatalf("got %q handed back, want none", got)
	}
}
