package ledger

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// book writes a ledger through real Writers (one per simulated process) and reads it back.
type book struct {
	t    *testing.T
	path string
	ws   map[int]*Writer
}

func newBook(t *testing.T) *book {
	t.Helper()
	b := &book{t: t, path: filepath.Join(t.TempDir(), "ledger"), ws: map[int]*Writer{}}
	t.Cleanup(func() {
		for _, w := range b.ws {
			_ = w.Close()
		}
	})
	return b
}

// as returns the writer of simulated process pid.
func (b *book) as(pid int) *Writer {
	b.t.Helper()
	if w, ok := b.ws[pid]; ok {
		return w
	}
	w, err := Open(b.path)
	if err != nil {
		b.t.Fatal(err)
	}
	w.pid = pid
	b.ws[pid] = w
	return w
}

// handled writes a whole run in process pid: run, outcome and (unless action is "")
// settlement.
func (b *book) handled(pid int, id string, attempt int, delivery, outcome, action string, err error) {
	w := b.as(pid)
	must(b.t, w.Run(id, attempt, delivery))
	must(b.t, w.Outcome(id, attempt, delivery, outcome))
	if action != "" {
		must(b.t, w.Settle(id, attempt, delivery, action, err))
	}
}

func (b *book) check(cap int, dead ...Dead) Report {
	b.t.Helper()
	evs, err := Read(b.path)
	if err != nil {
		b.t.Fatal(err)
	}
	return Check(Input{Events: evs, Dead: dead, MaxAttempts: cap})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantProblem fails unless exactly one problem is reported and it contains want.
func wantProblem(t *testing.T, rep Report, want string) {
	t.Helper()
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
		t.Fatalf("got problems %q, want one containing %q", rep.Problems, want)
	}
}

func wantOK(t *testing.T, rep Report) {
	t.Helper()
	if !rep.OK() {
		t.Fatalf("got problems %q, want none (%s)", rep.Problems, rep)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()

	t.Run("EveryFinalStateHolds", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		for _, id := range []string{"a", "b", "c", "d"} {
			must(t, b.as(1).Publish(id))
		}
		b.handled(2, "a", 1, "1-1", "ack", "ack", nil)
		b.handled(2, "b", 1, "1-2", "retry", "copy", nil)
		b.handled(3, "b", 2, "1-5", "ack", "ack", nil)
		b.handled(2, "c", 1, "1-3", "drop", "drop", nil)
		b.handled(2, "d", 1, "1-4", "retry", "park", nil)
		b.handled(3, "d", 2, "1-6", "retry", "dead_letter", nil)
		rep := b.check(2, Dead{ID: "d", Attempt: 2})
		wantOK(t, rep)
		if got, want := rep.Final, map[string]State{"a": StateAcked, "b": StateAcked, "c": StateDropped, "d": StateDeadLettered}; len(got) != 4 ||
			got["a"] != want["a"] || got["b"] != want["b"] || got["c"] != want["c"] || got["d"] != want["d"] {
			t.Fatalf("got final states %v, want %v", got, want)
		}
		if rep.Duplicates != 0 || rep.Runs != 6 {
			t.Fatalf("got %d duplicates of %d runs, want 0 of 6", rep.Duplicates, rep.Runs)
		}
	})

	t.Run("RetryNeverDeliveredIsLost", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "copy", nil)
		wantProblem(t, b.check(0), "message a lost")
	})

	t.Run("RetryDeliveredToKilledProcessBeforeItsRun", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "leave", nil)
		must(t, b.as(1).Kill(3)) // process 3 held the retry and died before running it
		must(t, b.as(4).Settle("", 2, "1-1", "dead_letter", nil))
		rep := b.check(2, Dead{ID: "a", Attempt: 2, Delivery: "1-1"})
		wantOK(t, rep)
		if rep.UnranRetries != 1 {
			t.Fatalf("got %d retries lost before their run, want 1", rep.UnranRetries)
		}
	})

	t.Run("RetryNeverRunWithoutKillIsReported", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "leave", nil)
		must(t, b.as(4).Settle("", 2, "1-1", "dead_letter", nil))
		wantProblem(t, b.check(2, Dead{ID: "a", Attempt: 2, Delivery: "1-1"}), "a retry was never delivered")
	})

	t.Run("RetryWhoseReadReplyWasLostIsDeadLetteredWithoutARun", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "copy", nil)
		// The copy 2-1 was delivered, its read's reply lost in a server restart; read
		// again at attempt 3, past the cap of 2, it is dead-lettered without a run.
		must(t, b.as(2).Settle("", 2, "2-1", "dead_letter", nil))
		dead := Dead{ID: "a", Attempt: 2, Delivery: "2-1"}
		evs, err := Read(b.path)
		must(t, err)
		rep := Check(Input{Events: evs, Dead: []Dead{dead}, MaxAttempts: 2, RepliesLost: true})
		wantOK(t, rep)
		if rep.UnranRetries != 1 {
			t.Fatalf("got %d retries that reached no handler, want 1", rep.UnranRetries)
		}
		wantProblem(t, b.check(2, dead), "a retry was never delivered")
	})

	t.Run("NeverHandledIsLost", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		wantProblem(t, b.check(0), "message a lost")
	})

	t.Run("DeadLetterSettledButMissingIsLost", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "dead_letter", nil)
		rep := b.check(0)
		if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0], "not in the dead-letter destination") {
			t.Fatalf("got problems %q, want the missing dead letter and the loss", rep.Problems)
		}
	})

	t.Run("CrashExplainsRedelivery", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		must(t, b.as(2).Run("a", 1, "1-1"))
		must(t, b.as(1).Kill(2))
		b.handled(3, "a", 1, "1-1", "ack", "ack", nil)
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Duplicates != 1 || rep.ByCrash != 1 || rep.Kills != 1 {
			t.Fatalf("got %d duplicates (%d by crash), %d kills; want 1, 1, 1", rep.Duplicates, rep.ByCrash, rep.Kills)
		}
	})

	t.Run("UnsettledRunInLiveProcessIsReported", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		must(t, b.as(2).Run("a", 1, "1-1"))
		b.handled(3, "a", 1, "1-1", "ack", "ack", nil)
		rep := b.check(0)
		if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0], "never settled, and its process was not killed") ||
			!strings.Contains(rep.Problems[1], "duplicate runs, but only 0 crashes") {
			t.Fatalf("got problems %q, want the unsettled run and the unexplained duplicate", rep.Problems)
		}
	})

	t.Run("FailedSettlementExplainsRedelivery", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "copy", errors.New("connection reset"))
		b.handled(2, "a", 1, "1-1", "ack", "ack", nil)
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Duplicates != 1 || rep.ByFailedSettlement != 1 {
			t.Fatalf("got %d duplicates (%d by failed settlement), want 1, 1", rep.Duplicates, rep.ByFailedSettlement)
		}
	})

	t.Run("ASettlementWrittenAgainAfterItsWriteFailedIsItsRunsSettlement", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "copy", errors.New("connection reset"))
		must(t, b.as(2).Settle("", 1, "1-1", "copy", nil)) // written again, no run
		b.handled(2, "a", 2, "2-1", "ack", "ack", nil)
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Duplicates != 0 || rep.Runs != 2 {
			t.Fatalf("got %d duplicates over %d runs, want 0 over 2: the copy written again is the first run's", rep.Duplicates, rep.Runs)
		}
		// Another action without a run is still a problem.
		b2 := newBook(t)
		must(t, b2.as(1).Publish("a"))
		b2.handled(2, "a", 1, "1-1", "retry", "copy", errors.New("connection reset"))
		must(t, b2.as(2).Settle("", 1, "1-1", "ack", nil))
		if rep := b2.check(0); len(rep.Problems) == 0 {
			t.Fatal("an ack without a run after a failed copy passed")
		}
	})

	t.Run("AckOfKilledProcessIsUnconfirmedFinal", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "ack", "", nil)
		must(t, b.as(1).Kill(2))
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Final["a"] != StateAckedUnconfirmed {
			t.Fatalf("got %q, want %q", rep.Final["a"], StateAckedUnconfirmed)
		}
	})

	t.Run("FailedAckWithoutRedeliveryIsUnconfirmedFinal", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "ack", "ack", errors.New("connection refused"))
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Final["a"] != StateAckedUnconfirmed {
			t.Fatalf("got %q, want %q", rep.Final["a"], StateAckedUnconfirmed)
		}
	})

	t.Run("FailedRetryWithoutRedeliveryIsLost", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "copy", errors.New("connection refused"))
		wantProblem(t, b.check(0), "message a lost")
	})

	t.Run("RetryOfKilledProcessWithoutRedeliveryIsLost", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "", nil)
		must(t, b.as(1).Kill(2))
		wantProblem(t, b.check(0), "message a lost")
	})

	t.Run("DeliveryAfterFinalSettlementIsReported", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "ack", "ack", nil)
		b.handled(3, "a", 1, "1-1", "ack", "ack", nil)
		rep := b.check(0)
		if len(rep.Problems) < 2 || !strings.Contains(strings.Join(rep.Problems, "\n"), "delivered again after it was settled") ||
			!strings.Contains(strings.Join(rep.Problems, "\n"), "2 final states") {
			t.Fatalf("got problems %q, want the late delivery and the two final states", rep.Problems)
		}
	})

	t.Run("ExpiryExplainsOverlappingRuns", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		must(t, b.as(2).Run("a", 1, "1-1"))
		must(t, b.as(3).Run("a", 1, "1-1"))
		must(t, b.as(2).Settle("a", 1, "1-1", "ack", nil))
		must(t, b.as(3).Settle("a", 1, "1-1", "ack", nil))
		rep := b.check(0)
		wantOK(t, rep)
		if rep.Duplicates != 1 || rep.ByExpiry != 1 {
			t.Fatalf("got %d duplicates (%d by expiry), want 1, 1", rep.Duplicates, rep.ByExpiry)
		}
	})

	t.Run("TwoDeadLettersAreReported", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "retry", "dead_letter", nil)
		rep := b.check(0, Dead{ID: "a", Attempt: 1}, Dead{ID: "a", Attempt: 1})
		if !strings.Contains(strings.Join(rep.Problems, "\n"), "2 dead letters") {
			t.Fatalf("got problems %q, want two dead letters reported", rep.Problems)
		}
	})

	t.Run("DeadLetterMustCarryTheCap", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 3, "1-1", "retry", "dead_letter", nil)
		wantProblem(t, b.check(5, Dead{ID: "a", Attempt: 3}), "want the cap 5")
	})

	t.Run("UnpublishedMessagesAreUnexpected", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		b.handled(2, "a", 1, "1-1", "ack", "ack", nil)
		b.handled(2, "x", 1, "1-2", "ack", "ack", nil)
		rep := b.check(0, Dead{ID: "y", Attempt: 1})
		if len(rep.Problems) != 2 || !strings.Contains(rep.Problems[0], `"y", never published`) || !strings.Contains(rep.Problems[1], `"x" handled but never published`) {
			t.Fatalf("got problems %q, want x and y reported", rep.Problems)
		}
	})

	t.Run("RunlessDeadLetterIsFoundByDelivery", func(t *testing.T) {
		t.Parallel()
		b := newBook(t)
		must(t, b.as(1).Publish("a"))
		must(t, b.as(2).Run("a", 1, "1-1"))
		must(t, b.as(1).Kill(2))
		must(t, b.as(3).Settle("", 2, "1-1", "dead_letter", nil))
		rep := b.check(0, Dead{ID: "a", Attempt: 2})
		wantOK(t, rep)
		if rep.Final["a"] != StateDeadLettered {
			t.Fatalf("got %q, want %q", rep.Final["a"], StateDeadLettered)
		}
	})
}

// TestCheckRunlessDeadLetterOfNeverRunDelivery: a delivery that never reached a handler
// (its consumers died first, every time) and was dead-lettered by the engine is found
// through the dead letter's delivery id.
func TestCheckRunlessDeadLetterOfNeverRunDelivery(t *testing.T) {
	t.Parallel()
	b := newBook(t)
	must(t, b.as(1).Publish("a"))
	must(t, b.as(3).Settle("", 5, "1-9", "dead_letter", nil))
	if rep := b.check(5); rep.OK() {
		t.Fatal("got no problem without the dead letter, want the settlement reported as unknown")
	}
	rep := b.check(5, Dead{ID: "a", Attempt: 5, Delivery: "1-9"})
	wantOK(t, rep)
	if rep.Final["a"] != StateDeadLettered {
		t.Fatalf("got %q, want %q", rep.Final["a"], StateDeadLettered)
	}
}

// TestWriterConcurrentAppendsKeepLinesWhole: many writers (as several processes would)
// append at once, and every line reads back whole.
func TestWriterConcurrentAppendsKeepLinesWhole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger")
	var wg sync.WaitGroup
	const writers, lines = 8, 500
	for i := range writers {
		w, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		w.pid = i + 1
		wg.Go(func() {
			defer w.Close()
			for j := range lines {
				if err := w.Run(strings.Repeat("x", 100+j%50), j, "d"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	evs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != writers*lines {
		t.Fatalf("got %d events, want %d", len(evs), writers*lines)
	}
}
