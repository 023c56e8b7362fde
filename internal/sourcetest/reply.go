package sourcetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/settlekit/settle"
)

// replyOf is what the reply scenarios' handler answers.
type replyOf struct {
	Amount int    `msgpack:"amount"`
	Part   string `msgpack:"part"`
}

// writesReplies reports whether the subject's transport writes replies itself
// (Subject.ReplyTo). One that does not must refuse, at startup, a ReplyTo without
// ReplyVia (it cannot make the reply and the completion one step): that is checked
// instead, and the scenario ends there.
func writesReplies(t *testing.T, s *Subject) bool {
	t.Helper()
	if s.ReplyTo != "" && s.Replies != nil {
		return true
	}
	app, err := settle.New(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(s.Source, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.ReplyTo("replies"))
	if err := app.Validate(); err == nil || !strings.Contains(err.Error(), "ReplyVia") {
		t.Fatalf("Validate with ReplyTo on a transport that writes no replies itself = %v, want a refusal naming ReplyVia", err)
	}
	return false
}

// testReplyIsWrittenWithTheCompletion: a handler's replies (two, from an out collector)
// are written to ReplyTo, in order, encoded with the mount's codec and naming the
// delivery they answer, and the original is completed by the same settlement.
func testReplyIsWrittenWithTheCompletion(t *testing.T, f Features, s *Subject) {
	if !writesReplies(t, s) {
		return
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, m *settle.Message, _ int) error {
		var in map[string]any
		if err := m.Decode(&in); err != nil {
			return err
		}
		if err := m.Reply(replyOf{Amount: 1250, Part: "first"}); err != nil {
			return err
		}
		return m.Reply(replyOf{Amount: 1250, Part: "second"})
	}), settle.ReplyTo(s.ReplyTo), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the reply", 0, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[0], settle.ActionReply, settle.OutcomeAck, 1)
	replies := s.Replies(t)
	if len(replies) != 2 {
		t.Fatalf("got %d replies, want 2", len(replies))
	}
	for i, want := range []string{"first", "second"} {
		var got replyOf
		if err := settle.Msgpack.Unmarshal(replies[i].Payload, &got); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if got.Part != want || got.Amount != 1250 {
			t.Fatalf("reply %d = %+v, want part %q", i, got, want)
		}
		if !f.NoHeaders && replies[i].Headers[settle.HeaderReplyOf] != evs[0].ID {
			t.Fatalf("reply %d headers %v, want %s = %s", i, replies[i].Headers, settle.HeaderReplyOf, evs[0].ID)
		}
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

// testFailedHandlerWritesNoReply: replies added by a handler that then fails are not
// written; the delivery settles by its outcome, and its retry's reply is the one
// written.
func testFailedHandlerWritesNoReply(t *testing.T, f Features, s *Subject) {
	if !writesReplies(t, s) {
		return
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, m *settle.Message, i int) error {
		if err := m.Reply(replyOf{Part: "attempt"}); err != nil {
			return err
		}
		if i == 1 {
			return settle.Retry(errors.New("gateway unavailable"))
		}
		return nil
	}), settle.ReplyTo(s.ReplyTo), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the reply after a retry", retryStep, finals(1))
	run.Stop(t)

	if n := len(c.all()); n != 2 {
		t.Fatalf("got %d handler calls, want 2", n)
	}
	if replies := s.Replies(t); len(replies) != 1 {
		t.Fatalf("got %d replies, want 1 (none for the failed delivery)", len(replies))
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}
