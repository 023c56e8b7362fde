package sqltest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

// logCounter is a slog.Handler that counts the records whose message contains each of
// its words.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
	words  []string
}

func newLogCounter(words ...string) *logCounter {
	return &logCounter{counts: map[string]int{}, words: words}
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.words {
		if strings.Contains(r.Message, w) {
			l.counts[w]++
		}
	}
	return nil
}

func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCounter) WithGroup(string) slog.Handler      { return l }

func (l *logCounter) count(w string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[w]
}

// attemptColumnMax is the largest attempt the test tables hold: SMALLINT on PostgreSQL and
// MySQL/MariaDB; on SQLite every INTEGER is 64-bit.
func attemptColumnMax(b backend) int64 {
	if b.d == inbox.SQLite {
		return math.MaxInt64
	}
	return math.MaxInt16
}

// setRow sets the attempt of the row holding payload (nil: NULL), and passes its lease
// (as a crashed worker's) when crashed.
func (x *testBundle) setRow(t *testing.T, payload string, attempt any, crashed bool) {
	t.Helper()
	q := quoteFor(x.b.d)
	lease := "NULL"
	if crashed {
		lease = farPast(x.b.d)
	}
	query := fmt.Sprintf("UPDATE %s SET %s = %s, %s = %s WHERE %s = %s", q(x.tb.Name), q(x.tb.Attempt), placeholder(x.b.d, 1),
		q(x.tb.LockedUntil), lease, q(x.tb.Payload), placeholder(x.b.d, 2))
	if _, err := x.db.ExecContext(context.Background(), query, attempt, []byte(payload)); err != nil {
		t.Fatalf("set row %s: %v", payload, err)
	}
}

// TestRowAtTheAttemptColumnsMaximumNeverStopsTheQueue: with no cap, a row that fails
// forever reaches its attempt column's maximum (SMALLINT: 32,767) and is held there,
// delivered and put back again without a failed settlement, and a row at the maximum
// whose worker crashed is claimed again at the maximum: neither makes a claim fail, so
// the ordinary rows beside them all settle; the row at the maximum is logged once.
func TestRowAtTheAttemptColumnsMaximumNeverStopsTheQueue(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		top := attemptColumnMax(b)
		x.publish(t, "jobs", "failing", "crashed")
		ordinary := make([]string, 10)
		for i := range ordinary {
			ordinary[i] = fmt.Sprintf("ok-%d", i)
		}
		x.publish(t, "jobs", ordinary...)
		x.setRow(t, "failing", top-1, false)
		x.setRow(t, "crashed", top, true)

		const held = "reached the largest attempt"
		logs := newLogCounter(held, "read failed", "settlement failed")
		var mu sync.Mutex
		seen := map[string][]int{}
		app, err := settle.New(settle.Config{Logger: slog.New(logs), OnSettled: x.rec.OnSettled, Test: settle.TestConfig{Clock: x.clock}})
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			p := string(m.Payload)
			mu.Lock()
			seen[p] = append(seen[p], m.Attempt)
			n := len(seen[p])
			mu.Unlock()
			if strings.HasPrefix(p, "ok-") || n > 3 {
				return nil
			}
			return settle.Retry(errors.New("provider unavailable"))
		}))
		startApp(t, app)
		evs := x.rec.WaitFor(t, waitLong, "every row acked", finals(len(ordinary)+2))
		for _, e := range evs {
			if e.Err != nil {
				t.Errorf("settlement of %s at attempt %d (%s) failed: %v", e.ID, e.Attempt, e.Action, e.Err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		// int64 attempts, as the message's int may be narrower on no platform we test.
		if got, want := fmt.Sprint(seen["failing"]), fmt.Sprint([]int64{top - 1, top, top, top}); got != want {
			t.Errorf("failing row delivered at %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(seen["crashed"]), fmt.Sprint([]int64{top, top, top, top}); got != want {
			t.Errorf("crashed row delivered at %s, want %s", got, want)
		}
		if n := logs.count(held); n != 1 {
			t.Errorf("the row held at the maximum was logged %d times, want once", n)
		}
		if n := logs.count("read failed"); n != 0 {
			t.Errorf("%d reads failed, want none", n)
		}
	})
}

// TestRowAtTheAttemptColumnsMaximumIsDeadLetteredUnderACap: a row whose worker crashed
// at the column's maximum is claimed (the claim adds nothing past the maximum) and
// dead-lettered at the cap without running, and the ordinary rows settle.
func TestRowAtTheAttemptColumnsMaximumIsDeadLetteredUnderACap(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "crashed", "ok-1", "ok-2")
		x.setRow(t, "crashed", attemptColumnMax(b), true)
		var ran sync.Map
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			ran.Store(string(m.Payload), true)
			return nil
		}), settle.MaxAttempts(5), settle.DeadLetter("jobs.dead"))
		evs := x.rec.WaitFor(t, waitLong, "three final settlements", finals(3))
		if count(evs, settle.ActionAck) != 2 || count(evs, settle.ActionDeadLetter) != 1 {
			t.Fatalf("got %+v, want two acks and one dead letter", evs)
		}
		if _, ok := ran.Load("crashed"); ok {
			t.Error("the row past the cap ran its handler")
		}
		rows := readRows(t, b, x.db, x.tb)
		if len(rows) != 1 || rows[0].group != "jobs.dead" || rows[0].payload != "crashed" {
			t.Fatalf("rows %+v, want the crashed row alone, in jobs.dead", rows)
		}
	})
}

// TestCapBeyondTheAttemptColumnsRangeIsRefusedAtOpen: a cap the attempt column cannot
// count to (40,000 on a SMALLINT) stops Open with an error naming both; SQLite's 64-bit
// INTEGER takes it.
func TestCapBeyondTheAttemptColumnsRangeIsRefusedAtOpen(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		p := source.Policy{MaxAttempts: 40000, DeadLetter: "jobs.dead"}
		tr := x.ib.Queue("jobs").Transport(source.Env{Clock: newFakeClock(), Logger: quietLogger(t), Mount: "capped", Policy: p, TestClock: x.clock})
		if errs := tr.Validate(p); len(errs) > 0 {
			t.Fatalf("validate: %v", errs)
		}
		err := tr.Open(context.Background())
		if err == nil {
			t.Cleanup(func() { _ = tr.Close(context.Background()) })
		}
		if b.d == inbox.SQLite {
			if err != nil {
				t.Fatalf("open: %v, want SQLite's 64-bit attempt to take the cap", err)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), "MaxAttempts(40000)") || !strings.Contains(err.Error(), "32767") {
			t.Fatalf("open: %v, want an error naming MaxAttempts(40000) and the column's 32767", err)
		}
	})
}

// TestAttemptBelowOneOrNullIsReadAsOneAndReachesTheCapExactly: rows another program
// wrote with attempt NULL, 0 and -7 are delivered at attempts 1, 2 and 3 under
// MaxAttempts(3) with a handler that always fails (Retry, and RetryAfter for the 0 row),
// then dead-lettered with attempt 3; a NULL row whose worker crashed is taken over at
// attempt 2 (the crash counted as its first) and dead-lettered at 3. The NULL row used to
// be retried without end at attempt 1 (the put-back kept NULL NULL), and the -7 row ran
// 11 times.
func TestAttemptBelowOneOrNullIsReadAsOneAndReachesTheCapExactly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{nullAttempt: true})
		x.publish(t, "jobs", "null", "zero", "minus7", "crashed")
		x.setRow(t, "null", nil, false)
		x.setRow(t, "zero", 0, false)
		x.setRow(t, "minus7", -7, false)
		x.setRow(t, "crashed", nil, true)
		var mu sync.Mutex
		seen := map[string][]int{}
		x.run(t, x.ib.Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			mu.Lock()
			seen[string(m.Payload)] = append(seen[string(m.Payload)], m.Attempt)
			mu.Unlock()
			if string(m.Payload) == "zero" {
				return settle.RetryAfter(time.Millisecond, errors.New("provider unavailable"))
			}
			return settle.Retry(errors.New("provider unavailable"))
		}), settle.MaxAttempts(3), settle.DeadLetter("jobs.dead"))
		evs := x.rec.WaitFor(t, waitLong, "four dead letters", finals(4))
		if n := count(evs, settle.ActionDeadLetter); n != 4 {
			t.Errorf("got %d dead letters (%+v), want 4", n, evs)
		}
		mu.Lock()
		defer mu.Unlock()
		for p, want := range map[string][]int{"null": {1, 2, 3}, "zero": {1, 2, 3}, "minus7": {1, 2, 3}, "crashed": {2, 3}} {
			if got := seen[p]; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("row %s delivered at attempts %v, want %v", p, got, want)
			}
		}
		for _, r := range readRows(t, b, x.db, x.tb) {
			if r.group != "jobs.dead" || r.attempt != 3 || r.leased {
				t.Errorf("row %+v, want it in jobs.dead at attempt 3, not leased", r)
			}
		}
	})
}

// TestRowPastTheCapIsBlamedOnACrashOnlyWhenItsLastDeliveryNeverSettled: under
// MaxAttempts(5), a row at attempt 7 whose lease is NULL (its last delivery settled; the
// cap was lowered since, or another program wrote the attempt) runs and is dead-lettered
// with its handler's error, where it used to be dead-lettered without running as
// "attempts spent by deliveries that never settled (the consumer crashed…)"; a row at
// attempt 7 whose lease passed (its worker crashed) is still dead-lettered without
// running, as spent by crashes.
func TestRowPastTheCapIsBlamedOnACrashOnlyWhenItsLastDeliveryNeverSettled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "settled", "crashed")
		x.setRow(t, "settled", 7, false)
		x.setRow(t, "crashed", 7, true)
		var ran sync.Map
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			ran.Store(string(m.Payload), m.Attempt)
			return errors.New("provider unavailable")
		}), settle.MaxAttempts(5), settle.DeadLetter("jobs.dead"))
		evs := x.rec.WaitFor(t, waitLong, "two dead letters", finals(2))
		byID := map[string]settle.Settled{}
		for _, e := range evs {
			byID[e.ID] = e
		}
		ids := column(t, x.db, fmt.Sprintf("SELECT %[1]s FROM %[2]s ORDER BY %[1]s", quoteFor(b.d)(x.tb.ID), quoteFor(b.d)(x.tb.Name)))
		settled, crashed := byID[fmt.Sprint(ids[0])], byID[fmt.Sprint(ids[1])]
		if a, ok := ran.Load("settled"); !ok || a != 7 {
			t.Errorf("the row whose last delivery settled ran at %v (ran: %v), want once at attempt 7", a, ok)
		}
		if settled.Action != settle.ActionDeadLetter || settled.HandlerErr == nil || settled.HandlerErr.Error() != "provider unavailable" {
			t.Errorf("the row whose last delivery settled: %+v, want dead-lettered with its handler's error", settled)
		}
		if _, ok := ran.Load("crashed"); ok {
			t.Error("the row whose worker crashed past the cap ran its handler")
		}
		if crashed.Action != settle.ActionDeadLetter || crashed.HandlerErr == nil || !strings.Contains(crashed.HandlerErr.Error(), "never settled") {
			t.Errorf("the crashed row: %+v, want dead-lettered as spent by deliveries that never settled", crashed)
		}
	})
}
