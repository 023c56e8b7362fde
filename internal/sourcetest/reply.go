package sourcetest

import (
	"context"
	"errors"
	"testing"

	"github.com/settlekit/settle"
)

// replyOf is what the reply scenarios' handler answers.
type replyOf struct {
	Amount int    `msgpack:"amount"`
	Part   string `msgpack:"part"`
}

// requireReplies skips a reply scenario on a transport that cannot write replies.
func requireReplies(t *testing.T, s *Subject) {
	t.Helper()
	if s.ReplyTo == "" || s.Replies == nil {
		t.Skip("the transport writes no replies itself (Subject.ReplyTo)")
	}
}

// testReplyIsWrittenWithTheCompletion: a handler's replies (two, from an out collector)
// are written to ReplyTo, in order, encoded with the mount's codec and naming the
// delivery they answer, and the original is completed by the same settlement.
func testReplyIsWrittenWithTheCompletion(t *testing.T, f Features, s *Subject) {
	requireReplies(t, s)
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
	requireReplies(t, s)
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
