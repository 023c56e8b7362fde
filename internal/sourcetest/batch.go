package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// batchLinger is the linger of the batch scenarios that wait for a full batch: far
// longer than any of them runs, so that a batch runs only once it is full.
const batchLinger = time.Hour

// batches records the batches a batch handler was called with: each one's values,
// and the delivery id each value came with.
type batches struct {
	mu   sync.Mutex
	list [][]int
	ids  map[int]string
}

func (b *batches) record(ms []*settle.Message, vs []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, append([]int(nil), vs...))
	if b.ids == nil {
		b.ids = map[int]string{}
	}
	for i, v := range vs {
		b.ids[v] = ms[i].ID
	}
}

// id returns the id of the last delivery whose value was v.
func (b *batches) id(v int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ids[v]
}

// startFullBatches starts an App whose batch handler h runs only full batches of 3
// (its linger is batchLinger), with a cap of 1 attempt to the dead letter.
func startFullBatches(t *testing.T, s *Subject, h settle.Handler) *Running {
	t.Helper()
	return Start(t, s, h, settle.Concurrency(3), settle.Timeout(2*batchLinger), settle.MaxAttempts(1), settle.DeadLetter(s.DeadLetter))
}

func (b *batches) all() [][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]int(nil), b.list...)
}

// publishInts publishes one message per value, each payload the value in msgpack.
func publishInts(t *testing.T, f Features, s *Subject, vs ...int) {
	t.Helper()
	_, headers := message(t, f)
	for _, v := range vs {
		payload, err := settle.Msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		s.Publish(t, payload, headers)
	}
}

// stopAfter waits for n final settlements, stops the App and returns its settlements,
// failing t unless they are n, all applied.
func stopAfter(t *testing.T, run *Running, n int) []settle.Settled {
	t.Helper()
	run.WaitFor(t, fmt.Sprintf("%d settlements", n), 0, finals(n))
	run.Stop(t)
	evs := run.Recorder.Events()
	checkApplied(t, evs)
	if len(evs) != n {
		t.Fatalf("got %d settlements, want %d: %s", len(evs), n, describe(evs))
	}
	return evs
}

// finalsByID returns the final settlement of each message, by its delivery's id.
func finalsByID(evs []settle.Settled) map[string]settle.Settled {
	out := map[string]settle.Settled{}
	for _, e := range evs {
		if e.Final() {
			out[e.ID] = e
		}
	}
	return out
}

// A batch's messages settle each on its own: a payload that does not decode never
// joins the batch and spends only its own attempt (to the dead letter here), one the
// batch handler drops is dropped, and the others are acked at their first attempt.
func testBatchSettlesEachMessageOnItsOwn(t *testing.T, f Features, s *Subject) {
	var seen batches
	h := settle.TypedBatch(3, batchLinger, func(_ context.Context, ms []*settle.Message, vs []int) error {
		seen.record(ms, vs)
		errs := make([]error, len(vs))
		for i, v := range vs {
			if v == 2 {
				errs[i] = settle.Drop(errors.New("two is unwanted"))
			}
		}
		return settle.PerMessage(errs)
	})
	run := startFullBatches(t, s, h)
	_, headers := message(t, f)
	s.Publish(t, []byte{0xc1, 0xc1}, headers) // 0xc1 is never used by msgpack
	publishInts(t, f, s, 1, 2, 3)
	evs := stopAfter(t, run, 4)
	if got := seen.all(); len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("the batch handler saw %v, want one batch of the 3 payloads that decode", got)
	}
	byID := finalsByID(evs)
	checkEvent(t, byID[seen.id(1)], settle.ActionAck, settle.OutcomeAck, 1)
	checkEvent(t, byID[seen.id(2)], settle.ActionDrop, settle.OutcomeDrop, 1)
	checkEvent(t, byID[seen.id(3)], settle.ActionAck, settle.OutcomeAck, 1)
	dead := 0
	for _, e := range evs {
		if e.Action == settle.ActionDeadLetter {
			dead++
			var de *settle.DecodeError
			if !errors.As(e.HandlerErr, &de) || e.Attempt != 1 {
				t.Fatalf("got %s, want the undecodable payload dead-lettered at attempt 1 with a *settle.DecodeError", describeOne(e))
			}
		}
	}
	if dead != 1 || len(s.DeadLetters(t)) != 1 {
		t.Fatalf("got %d dead-letter settlements and %d dead letters, want 1 of each", dead, len(s.DeadLetters(t)))
	}
	checkNothingPending(t, s)
}

// A panic in a batch handler is not charged to the whole batch: each message runs
// again alone, and only the one that panics alone is settled as a failure (here dead
// letter at its first attempt) with a *settle.PanicError.
func testBatchPanicChargesOnlyThePanickingMessage(t *testing.T, f Features, s *Subject) {
	var seen batches
	h := settle.TypedBatch(3, batchLinger, func(_ context.Context, ms []*settle.Message, vs []int) error {
		seen.record(ms, vs)
		for _, v := range vs {
			if v == 2 {
				panic("two breaks the bulk insert")
			}
		}
		return nil
	})
	run := startFullBatches(t, s, h)
	publishInts(t, f, s, 1, 2, 3)
	evs := stopAfter(t, run, 3)
	got := seen.all()
	if len(got) != 4 || len(got[0]) != 3 {
		t.Fatalf("the batch handler saw %v, want the batch of 3, then each of its messages alone", got)
	}
	for _, b := range got[1:] {
		if len(b) != 1 {
			t.Fatalf("the batch handler saw %v, want each message run alone after the panic", got)
		}
	}
	byID := finalsByID(evs)
	checkEvent(t, byID[seen.id(1)], settle.ActionAck, settle.OutcomeAck, 1)
	checkEvent(t, byID[seen.id(3)], settle.ActionAck, settle.OutcomeAck, 1)
	two := byID[seen.id(2)]
	checkEvent(t, two, settle.ActionDeadLetter, settle.OutcomeRetry, 1)
	var pe *settle.PanicError
	if !errors.As(two.HandlerErr, &pe) {
		t.Fatalf("got handler error %v, want a *settle.PanicError", two.HandlerErr)
	}
	checkNothingPending(t, s)
}

// A batch never holds more messages than its size, whatever the reads return: five
// messages with a size of 2 run in batches of at most 2, each message once, all acked.
func testBatchNeverExceedsItsSize(t *testing.T, f Features, s *Subject) {
	var seen batches
	const linger = 50 * time.Millisecond
	h := settle.TypedBatch(2, linger, func(_ context.Context, ms []*settle.Message, vs []int) error {
		seen.record(ms, vs)
		return nil
	})
	run := Start(t, s, h, settle.Concurrency(4))
	publishInts(t, f, s, 1, 2, 3, 4, 5)
	run.WaitFor(t, "five acks", linger, finals(5))
	run.Stop(t)

	evs := run.Recorder.Events()
	checkApplied(t, evs)
	for _, e := range evs {
		checkEvent(t, e, settle.ActionAck, settle.OutcomeAck, 1)
	}
	count := map[int]int{}
	for _, b := range seen.all() {
		if len(b) > 2 {
			t.Fatalf("a batch of %d messages %v, want at most 2", len(b), b)
		}
		for _, v := range b {
			count[v]++
		}
	}
	if len(evs) != 5 || fmt.Sprint(count) != "map[1:1 2:1 3:1 4:1 5:1]" {
		t.Fatalf("got %d settlements and payloads seen %v, want each of 1..5 once: %s", len(evs), count, describe(evs))
	}
	checkNothingPending(t, s)
}
