package sourcetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// dedupWindow is the scenarios' Dedupe window: past it, on a fake clock, a key runs again.
const dedupWindow = time.Hour

// dedupedLine is what the engine logs of a delivery acked without running its handler.
const dedupedLine = "settle: ack without running the handler: its dedup key was completed within the window (Dedupe)"

// keyed publishes a message whose payload is key's (the scenarios' key function reads
// it back), and returns it.
func keyed(t *testing.T, s *Subject, key string) []byte {
	t.Helper()
	payload, err := settle.Msgpack.Marshal(map[string]any{"scenario": t.Name(), "key": key})
	if err != nil {
		t.Fatal(err)
	}
	s.Publish(t, payload, nil)
	return payload
}

// payloadKey is the scenarios' Dedupe key function: the "key" field of the payload.
func payloadKey(m *settle.Message) string {
	var v map[string]any
	if err := m.Decode(&v); err != nil {
		return ""
	}
	k, _ := v["key"].(string)
	return k
}

// deduplicated counts the events of deliveries acked without running their handler.
func deduplicated(evs []settle.Settled) int {
	n := 0
	for _, e := range evs {
		if e.Deduplicated {
			n++
		}
	}
	return n
}

// A delivery whose key was acked within the window is acked without running the
// handler, and its Settled event says so; another key runs; once the window has passed
// (on a fake clock), the key runs again.
func testDedupeSkipsAKeyCompletedWithinTheWindow(t *testing.T, f Features, s *Subject) {
	if f.NoDedupe {
		checkRefused(t, s, settle.Dedupe(dedupWindow, payloadKey))
		return
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error { return nil }), settle.Dedupe(dedupWindow, payloadKey))
	keyed(t, s, "order-1")
	run.WaitFor(t, "the first ack", 0, finals(1))
	keyed(t, s, "order-1")
	evs := run.WaitFor(t, "the duplicate's ack", 0, finals(2))
	if n := deduplicated(evs); n != 1 {
		t.Fatalf("got %d deduplicated settlements, want 1: %s", n, describe(evs))
	}
	if n := len(c.all()); n != 1 {
		t.Fatalf("got %d handler calls, want 1: a key acked within the window never runs again", n)
	}
	if n := run.logs.count(dedupedLine); n != 1 {
		t.Fatalf("%q logged %d times, want 1", dedupedLine, n)
	}
	keyed(t, s, "order-2")
	run.WaitFor(t, "another key's ack", 0, finals(3))
	if n := len(c.all()); n != 2 {
		t.Fatalf("got %d handler calls, want 2: another key runs", n)
	}
	if s.Advance != nil {
		s.Advance(dedupWindow + time.Second)
		keyed(t, s, "order-1")
		run.WaitFor(t, "the key's ack once its window passed", 0, finals(4))
		if n := len(c.all()); n != 3 {
			t.Fatalf("got %d handler calls, want 3: a key runs again once its window has passed", n)
		}
	}
	run.Stop(t)
	evs = run.Recorder.Events()
	checkApplied(t, evs)
	for _, e := range evs {
		if e.Action != settle.ActionAck {
			t.Fatalf("got %s, want only acks", describeOne(e))
		}
	}
	checkNothingPending(t, s)
}

// Only a completion marks a key: a failed delivery, a Drop and a key of "" mark nothing,
// so their messages' next deliveries run.
func testDedupeMarksOnlyCompletions(t *testing.T, f Features, s *Subject) {
	if f.NoDedupe {
		t.Skip("the transport refuses Dedupe")
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, m *settle.Message, n int) error {
		switch {
		case n == 1:
			return settle.Retry(errors.New("the first delivery fails"))
		case n == 3:
			return settle.Drop(errors.New("dropped"))
		}
		return nil
	}), settle.Dedupe(dedupWindow, payloadKey),
		// The wait below moves a fake clock a retryStep every nudge: at the default
		// Timeout, a second delivery whose mark read and handler took 50 ms under load was
		// settled as timed out (seen on PostgreSQL in CI).
		settle.Timeout(10_000*retryStep))
	keyed(t, s, "k")
	run.WaitFor(t, "the retried delivery's ack", retryStep, hasAction(settle.ActionAck))
	keyed(t, s, "dropped")
	run.WaitFor(t, "the drop", 0, hasAction(settle.ActionDrop))
	keyed(t, s, "dropped")
	keyed(t, s, "")
	keyed(t, s, "")
	evs := run.WaitFor(t, "every message's completion", 0, finals(5))
	run.Stop(t)
	checkApplied(t, evs)
	if n := deduplicated(evs); n != 0 {
		t.Fatalf("got %d deduplicated settlements, want 0: %s", n, describe(evs))
	}
	if n := len(c.all()); n != 6 {
		t.Fatalf("got %d handler calls, want 6 (fail, ack, drop, ack, ack, ack)", n)
	}
}

// Dedupe's bad values stop startup, each with its reason.
func testDedupeRefusesBadValues(t *testing.T, f Features, s *Subject) {
	for _, tc := range []struct {
		opt  settle.MountOption
		want string
	}{
		{settle.Dedupe(0, payloadKey), "window must be positive"},
		{settle.Dedupe(-time.Second, payloadKey), "window must be positive"},
		{settle.Dedupe(time.Minute, nil), "give a key function"},
	} {
		app, err := settle.New(s.Config)
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(s.Source, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), tc.opt)
		err = app.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("App.Validate = %v, want a refusal saying %q", err, tc.want)
		}
	}
}

// A delivery completed by its replies marks its key as an ack does: the key's next
// delivery within the window writes no second reply and runs nothing.
func testDedupeMarksAReply(t *testing.T, f Features, s *Subject) {
	if f.NoDedupe || s.ReplyTo == "" || s.Replies == nil {
		t.Skip("the transport refuses Dedupe or writes no replies itself")
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, m *settle.Message, _ int) error {
		return m.Reply(replyOf{Amount: 1, Part: "only"})
	}), settle.Dedupe(dedupWindow, payloadKey), settle.ReplyTo(s.ReplyTo))
	keyed(t, s, "order-1")
	run.WaitFor(t, "the reply", 0, hasAction(settle.ActionReply))
	keyed(t, s, "order-1")
	evs := run.WaitFor(t, "the duplicate's ack", 0, finals(2))
	run.Stop(t)
	checkApplied(t, evs)
	if n := deduplicated(evs); n != 1 {
		t.Fatalf("got %d deduplicated settlements, want 1: %s", n, describe(evs))
	}
	if n := len(c.all()); n != 1 {
		t.Fatalf("got %d handler calls, want 1: a key replied within the window never runs again", n)
	}
	if n := len(s.Replies(t)); n != 1 {
		t.Fatalf("got %d replies, want 1", n)
	}
}
