package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// The log lines a mount writes when it sees its pause come and go.
const (
	logPaused  = "settle: paused: reading nothing new until resumed; what the mount holds settles"
	logResumed = "settle: resumed"
)

// pauseStep is how far a fake clock moves on each nudge while a pause scenario waits
// for the mount to check its pause (at most once a second of the App's clock).
const pauseStep = 100 * time.Millisecond

// A paused mount's watch: how long a scenario watches it for deliveries it must not
// make. A negative can only be bounded: on the real clock the watch spans more than
// one pause check; on a fake clock it is shorter, and the clock is moved past several
// checks meanwhile.
const (
	pausedWatchReal = 1500 * time.Millisecond
	pausedWatchFake = 300 * time.Millisecond
)

// A mount paused from outside (a control key or row) reads nothing new, finishes and
// settles what it holds, and once resumed reads what was published meanwhile: the
// first message's handler is held across the pause and acked while paused, two
// published while paused wait, and come after the resume at attempt 1.
func testPausedMountReadsNothingNewAndResumes(t *testing.T, f Features, s *Subject) {
	requirePause(t, f, s)
	c := newCalls(s)
	started, release := make(chan struct{}), make(chan struct{})
	run := Start(t, s, c.handler(func(_ context.Context, _ *settle.Message, n int) error {
		if n == 1 {
			close(started)
			<-release // held across the pause
		}
		return nil
	}))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	waitClosed(t, started, "the first handler to start")

	s.Pause(t)
	run.logs.waitN(t, logPaused, 1, nudge(s, pauseStep))
	close(release)
	run.WaitFor(t, "the ack of the message held across the pause", 0, finals(1))

	s.Publish(t, payload, headers)
	s.Publish(t, payload, headers)
	watchPaused(t, s)
	if cs := c.all(); len(cs) != 1 {
		t.Fatalf("the paused mount ran %d handlers, want only the one that started before the pause", len(cs))
	}
	if evs := run.Recorder.Events(); len(evs) != 1 {
		t.Fatalf("the paused mount settled %s, want only the ack of the one it held", describe(evs))
	}

	s.Resume(t)
	run.logs.waitN(t, logResumed, 1, nudge(s, pauseStep))
	run.WaitFor(t, "the two published while paused", pauseStep, finals(3))
	run.Stop(t)
	evs := run.Recorder.Events()
	if len(evs) != 3 {
		t.Fatalf("got %d settlements, want 3 acks: %s", len(evs), describe(evs))
	}
	for _, ev := range evs {
		checkEvent(t, ev, settle.ActionAck, settle.OutcomeAck, 1)
	}
	if n := run.logs.count(logPaused); n != 1 {
		t.Fatalf("the mount logged %q %d times, want once per pause", logPaused, n)
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

// A graceful stop works while the mount is paused, and what was published meanwhile
// waits, unspent, for the App that runs once the mount is resumed.
func testStopWhilePausedKeepsWhatWaits(t *testing.T, f Features, s *Subject) {
	requirePause(t, f, s)
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error { return nil }))
	s.Pause(t)
	run.logs.waitN(t, logPaused, 1, nudge(s, pauseStep))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.Stop(t)
	if n := len(c.all()); n != 0 {
		t.Fatalf("the paused App ran %d handlers, want none", n)
	}

	s.Resume(t)
	c2 := newCalls(s)
	run2 := Start(t, s, c2.handler(func(context.Context, *settle.Message, int) error { return nil }))
	run2.WaitFor(t, "the message published while paused", pauseStep, finals(1))
	run2.Stop(t)
	cs := c2.all()
	if len(cs) != 1 {
		t.Fatalf("the resumed App ran %d handlers, want 1", len(cs))
	}
	checkCall(t, f, cs[0], 1, payload, headers)
	if n := run2.logs.count(logPaused); n != 0 {
		t.Fatalf("the resumed App logged %q %d times, want never", logPaused, n)
	}
	checkNothingPending(t, s)
}

// requirePause skips a transport that cannot be paused, and fails a subject that
// forgot its Pause and Resume.
func requirePause(t *testing.T, f Features, s *Subject) {
	t.Helper()
	if f.NeverPaused {
		t.Skip("the transport cannot be paused (Features.NeverPaused)")
	}
	if s.Pause == nil || s.Resume == nil {
		t.Fatal("the subject gives no Pause and Resume: set them, or Features.NeverPaused")
	}
}

// nudge returns what moves the subject's fake clock by step (nil on the real clock).
func nudge(s *Subject, step time.Duration) func() {
	if s.Advance == nil {
		return nil
	}
	return func() { s.Advance(step) }
}

// watchPaused lets a paused mount run through more than one pause check (see
// pausedWatchReal).
func watchPaused(t *testing.T, s *Subject) {
	t.Helper()
	if s.Advance == nil {
		time.Sleep(pausedWatchReal) // a bounded negative: nothing must come
		return
	}
	stop := nudgeUntil(s.Advance, pauseStep)
	time.Sleep(pausedWatchFake) // a bounded negative, the fake clock moved past several checks meanwhile
	stop()
}
