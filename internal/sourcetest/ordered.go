package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// OrderedSubject is a source that keeps a key's messages in order (settle.Ordered): a
// Stream read under one consumer name, a PartitionedStream.
type OrderedSubject struct {
	// Clock is the App's fake clock.
	Clock *Clock
	// Crash reads the oldest n entries as consumer crashed would have, then dies
	// without settling them (they stay pending at its name).
	Crash func(t testing.TB, n int)
	// DeadLetter is the destination to pass to settle.DeadLetter.
	DeadLetter string
	// Publish writes one message with key and payload.
	Publish func(t testing.TB, key, payload string)
	// Source is the source to mount with settle.Ordered (a Stream: under the name
	// Crash reads as; a PartitionedStream: a member that takes the crashed one's
	// partitions over).
	Source settle.Source
	// Before is the source an App stopped before Source's starts mounts (a Stream:
	// Source itself; a PartitionedStream: another member).
	Before settle.Source
}

// RunOrdered runs the Ordered scenarios on a fresh subject each.
func RunOrdered(t *testing.T, newSubject func(t *testing.T) *OrderedSubject) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *OrderedSubject)
	}{
		{"AKeysLaterMessageWaitsWhileItsHeadIsDelayed", testOrderedHeadDelayed},
		{"DifferentKeysRunInParallel", testOrderedKeysParallel},
		{"ADeadLetterReleasesTheKey", testOrderedDeadLetterReleases},
		{"AfterACrashTheInFlightRunsAgainBeforeTheKeysLaterMessages", testOrderedAfterCrash},
		{"AHandlerCutAtStopRunsAgainBeforeTheKeysLaterMessages", testOrderedCutAtStop},
		{"ARetryWaitingInPlaceAtStopRunsUnderTheNextReaderBeforeTheKeysLaterMessages", testOrderedRetryWaitingAtStop},
		{"AttemptsSpentInPlaceCountAfterACutAndTheCapHolds", testOrderedAttemptsInPlaceSurviveACut},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newSubject(t))
		})
	}
}

// starts records the handler's starts, in order, and checks at each start that the
// message before it of its key has settled finally.
type starts struct {
	mu      sync.Mutex
	order   []string // "payload#attempt"
	settled map[string]bool
	prev    map[string]string // payload -> the payload before it of its key
	bad     []string
}

func newStarts() *starts {
	return &starts{settled: map[string]bool{}, prev: map[string]string{}}
}

// follows declares payloads, in publish order, of one key.
func (s *starts) follows(payloads ...string) {
	for i := 1; i < len(payloads); i++ {
		s.prev[payloads[i]] = payloads[i-1]
	}
}

func (s *starts) start(m *settle.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := string(m.Payload)
	s.order = append(s.order, fmt.Sprintf("%s#%d", p, m.Attempt))
	if before, ok := s.prev[p]; ok && !s.settled[before] {
		s.bad = append(s.bad, fmt.Sprintf("%s started before %s had settled", p, before))
	}
}

// onSettled marks a final settlement's message settled (payload by id).
func (s *starts) onSettled(ids *sync.Map) func(context.Context, settle.Settled) {
	return func(_ context.Context, ev settle.Settled) {
		if !ev.Final() || ev.Err != nil {
			return
		}
		if p, ok := ids.Load(ev.Key + " " + ev.ID); ok { // ids repeat across a partitioned stream's keys
			s.mu.Lock()
			s.settled[p.(string)] = true
			s.mu.Unlock()
		}
	}
}

func (s *starts) check(t testing.TB) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		t.Fatalf("out of order: %s (starts: %v)", strings.Join(s.bad, "; "), s.order)
	}
	return slices.Clone(s.order)
}

// ofKey returns the starts of payloads with prefix.
func ofKey(all []string, prefix string) []string {
	var out []string
	for _, s := range all {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// startOrdered mounts s.Source with Ordered and opts, running h after recording each
// start.
func startOrdered(t *testing.T, s *OrderedSubject, st *starts, h func(ctx context.Context, m *settle.Message) error, opts ...settle.MountOption) *Running {
	t.Helper()
	return startOrderedOn(t, s, s.Source, st, h, opts...)
}

// startOrderedOn is startOrdered on src.
func startOrderedOn(t *testing.T, s *OrderedSubject, src settle.Source, st *starts, h func(ctx context.Context, m *settle.Message) error, opts ...settle.MountOption) *Running {
	t.Helper()
	ids := &sync.Map{}
	sub := &Subject{Source: src, Advance: s.Clock.Advance}
	sub.Config.Test.Clock = s.Clock
	sub.Config.OnSettled = st.onSettled(ids)
	return Start(t, sub, settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		ids.Store(m.Key+" "+m.ID, string(m.Payload))
		st.start(m)
		return h(ctx, m)
	}), append([]settle.MountOption{settle.Ordered()}, opts...)...)
}

func acked(payloads ...string) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool { return Finals(evs) >= len(payloads) }
}

func testOrderedHeadDelayed(t *testing.T, s *OrderedSubject) {
	st := newStarts()
	st.follows("a1", "a2")
	var mu sync.Mutex
	failed := false
	run := startOrdered(t, s, st, func(_ context.Context, m *settle.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if string(m.Payload) == "a1" && !failed {
			failed = true
			return settle.RetryAfter(time.Minute, errors.New("not yet"))
		}
		return nil
	}, settle.Concurrency(4))
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	s.Publish(t, "b", "b1")
	run.Recorder.WaitFor(t, waitTimeout, "b1's ack and a1's retry in place", func(evs []settle.Settled) bool {
		return Finals(evs) >= 1 && hasAction(settle.ActionLeave)(evs)
	})
	if got := ofKey(st.check(t), "a"); !slices.Equal(got, []string{"a1#1"}) {
		t.Fatalf("key a's starts while its head waits out its delay: %v, want only a1#1 (a2 waits)", got)
	}
	for _, e := range run.Recorder.Events() {
		if e.Action == settle.ActionCopy || e.Action == settle.ActionPark {
			t.Fatalf("the head's retry was %s, want left in place (leave)", e.Action)
		}
	}
	s.Clock.Advance(time.Minute)
	run.Recorder.WaitFor(t, waitTimeout, "every ack", acked("a1", "a2", "b1"))
	run.Stop(t)
	if got := ofKey(st.check(t), "a"); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1"}) {
		t.Fatalf("key a's starts: %v, want a1#1 a1#2 a2#1", got)
	}
}

func testOrderedKeysParallel(t *testing.T, s *OrderedSubject) {
	st := newStarts()
	st.follows("a1", "a2")
	bStarted := make(chan struct{})
	run := startOrdered(t, s, st, func(ctx context.Context, m *settle.Message) error {
		switch string(m.Payload) {
		case "a1":
			select { // a1 runs until b1 has started beside it
			case <-bStarted:
			case <-time.After(waitTimeout):
				return settle.Drop(errors.New("b1 never started while a1 ran"))
			}
		case "b1":
			close(bStarted)
		}
		return nil
	}, settle.Concurrency(2))
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	s.Publish(t, "b", "b1")
	evs := run.Recorder.WaitFor(t, waitTimeout, "every ack", acked("a1", "a2", "b1"))
	run.Stop(t)
	st.check(t)
	for _, e := range evs {
		if e.Action != settle.ActionAck {
			t.Fatalf("got %s, want every message acked (b1 ran beside a1): %s", e.Action, describe(evs))
		}
	}
}

func testOrderedDeadLetterReleases(t *testing.T, s *OrderedSubject) {
	st := newStarts()
	st.follows("a1", "a2")
	run := startOrdered(t, s, st, func(_ context.Context, m *settle.Message) error {
		if string(m.Payload) == "a1" {
			return errors.New("always fails")
		}
		return nil
	}, settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter), settle.Backoff(func(int, error) time.Duration { return 0 }))
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	evs := run.Recorder.WaitFor(t, waitTimeout, "a1's dead letter and a2's ack", acked("a1", "a2"))
	run.Stop(t)
	if got := st.check(t); !slices.Equal(got, []string{"a1#1", "a1#2", "a1#3", "a2#1"}) {
		t.Fatalf("starts: %v, want a1 three times in place, then a2", got)
	}
	if !hasAction(settle.ActionDeadLetter)(evs) {
		t.Fatalf("no dead letter: %s", describe(evs))
	}
}

func testOrderedAfterCrash(t *testing.T, s *OrderedSubject) {
	st := newStarts()
	st.follows("a1", "a2", "a3")
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	s.Publish(t, "a", "a3")
	s.Crash(t, 2) // a1 ran (or was about to) and a2 was read: neither settled
	run := startOrdered(t, s, st, func(context.Context, *settle.Message) error { return nil }, settle.Concurrency(4))
	run.Recorder.WaitFor(t, waitTimeout, "every ack", acked("a1", "a2", "a3"))
	run.Stop(t)
	got := st.check(t)
	if len(got) != 3 || got[0] != "a1#2" || !strings.HasPrefix(got[1], "a2#") || got[2] != "a3#1" {
		t.Fatalf("starts after the crash: %v, want a1 again (attempt 2), then a2, then a3", got)
	}
}

// testOrderedCutAtStop: an App stops while a key's head runs and its handler outlives
// the drain timeout: the head is cut, left unsettled (as a crash leaves it), and its
// later messages, waiting behind it, are handed back; the next App runs the head again
// before them.
func testOrderedCutAtStop(t *testing.T, s *OrderedSubject) {
	first := newStarts()
	started := make(chan struct{})
	before := startOrderedOn(t, s, s.Before, first, func(ctx context.Context, m *settle.Message) error {
		if string(m.Payload) == "a1" {
			close(started)
			<-ctx.Done() // runs until the drain timeout cuts it
			return ctx.Err()
		}
		return errors.New("only a1 runs before the stop")
	}, settle.Concurrency(4))
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	cutAtStop(t, s, before, started, "a1")
	if got := first.check(t); !slices.Equal(got, []string{"a1#1"}) {
		t.Fatalf("starts before the stop: %v, want a1#1 only", got)
	}
	for _, e := range before.Recorder.Events() {
		if e.Final() {
			t.Fatalf("a final settlement at the cut: %s", describe(before.Recorder.Events()))
		}
	}
	st := newStarts()
	st.follows("a1", "a2", "a3")
	s.Publish(t, "a", "a3")
	run := startOrdered(t, s, st, func(context.Context, *settle.Message) error { return nil }, settle.Concurrency(4))
	run.WaitFor(t, "every ack", 100*time.Millisecond, acked("a1", "a2", "a3")) // moves the clock past the first App's lease
	run.Stop(t)
	got := st.check(t)
	if len(got) != 3 || got[0] != "a1#2" || !strings.HasPrefix(got[1], "a2#") || got[2] != "a3#1" {
		t.Fatalf("starts after the cut: %v, want a1 again (attempt 2), then a2, then a3", got)
	}
}

// testOrderedRetryWaitingAtStop: an App stops while a key's head waits out its retry's
// delay in place: the stopping App does not run it (its entry stays pending) and hands
// back what waited behind it; the next App runs the head again, as its next attempt,
// before them.
func testOrderedRetryWaitingAtStop(t *testing.T, s *OrderedSubject) {
	first := newStarts()
	before := startOrderedOn(t, s, s.Before, first, func(_ context.Context, m *settle.Message) error {
		if string(m.Payload) == "a1" {
			return settle.RetryAfter(time.Hour, errors.New("not yet"))
		}
		return errors.New("only a1 runs before the stop")
	}, settle.Concurrency(4))
	s.Publish(t, "a", "a1")
	s.Publish(t, "a", "a2")
	before.Recorder.WaitFor(t, waitTimeout, "a1's retry in place", hasAction(settle.ActionLeave))
	before.Stop(t)
	if got := first.check(t); !slices.Equal(got, []string{"a1#1"}) {
		t.Fatalf("starts before the stop: %v, want a1#1 only (its retry waits an hour)", got)
	}
	st := newStarts()
	st.follows("a1", "a2")
	run := startOrdered(t, s, st, func(context.Context, *settle.Message) error { return nil }, settle.Concurrency(4))
	run.WaitFor(t, "every ack", 100*time.Millisecond, acked("a1", "a2")) // moves the clock past the first App's lease
	run.Stop(t)
	got := st.check(t)
	if len(got) != 2 || got[0] != "a1#2" || !strings.HasPrefix(got[1], "a2#") {
		t.Fatalf("starts after the stop: %v, want a1 again (attempt 2), then a2", got)
	}
}

// testOrderedAttemptsInPlaceSurviveACut: a1 fails at attempt 1 and is retried in place;
// attempt 2 is cut at stop (left unsettled, as by a crash). The next reader counts both:
// it runs a1 at attempt 3, the cap's last, and dead-letters it there (before, the
// attempts spent in place lived in memory only, and it ran a1 at 2 and 3 again: four
// runs under a cap of 3).
func testOrderedAttemptsInPlaceSurviveACut(t *testing.T, s *OrderedSubject) {
	first := newStarts()
	started := make(chan struct{})
	noWait := settle.Backoff(func(int, error) time.Duration { return 0 })
	before := startOrderedOn(t, s, s.Before, first, func(ctx context.Context, m *settle.Message) error {
		if m.Attempt == 1 {
			return errors.New("fails")
		}
		close(started)
		<-ctx.Done() // runs until the drain timeout cuts it
		return ctx.Err()
	}, settle.Concurrency(4), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter), noWait)
	s.Publish(t, "a", "a1")
	cutAtStop(t, s, before, started, "a1's attempt 2")
	if got := first.check(t); !slices.Equal(got, []string{"a1#1", "a1#2"}) {
		t.Fatalf("starts before the cut: %v, want a1#1 then a1#2", got)
	}
	st := newStarts()
	run := startOrdered(t, s, st, func(context.Context, *settle.Message) error { return errors.New("fails") },
		settle.Concurrency(4), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter), noWait)
	run.WaitFor(t, "a1's dead letter", 100*time.Millisecond, hasAction(settle.ActionDeadLetter))
	run.Stop(t)
	if got := st.check(t); !slices.Equal(got, []string{"a1#3"}) {
		t.Fatalf("starts after the cut: %v; want a1#3 alone, then its dead letter (attempts 1 and 2 were spent before the cut; the cap is 3)", got)
	}
}

// cutAtStop waits until started is closed (what, a handler that runs until its context
// ends, has started), then stops before, moving s's clock to the drain timeout so that
// the handler is cut: its delivery is left unsettled, as by a crash.
func cutAtStop(t *testing.T, s *OrderedSubject, before *Running, started <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(waitTimeout):
		t.Fatalf("%s never started", what)
	}
	before.Cancel()
	cut := time.NewTicker(nudgeEvery)
	defer cut.Stop()
	for {
		select {
		case <-before.done:
			return
		case <-cut.C:
			s.Clock.Advance(time.Second) // to the drain timeout, on the App's clock
		case <-time.After(stopTimeout):
			t.Fatal("the App did not stop")
		}
	}
}

// CrashRead reads the oldest n new entries of stream key under consumer of group, as a
// process that then died: they stay pending at its name (an OrderedSubject's Crash).
func CrashRead(t testing.TB, rdb redis.UniversalClient, key, group, consumer string, n int) {
	t.Helper()
	res, err := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{key, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != n {
		t.Fatalf("crash read of %d from %s: %v %v", n, key, res, err)
	}
}
