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

// setRow sets the attempt of the row holding payload, and passes its lease (as a crashed
// worker's) when crashed.
func (x *testBundle) setRow(t *testing.T, payload string, attempt int64, crashed bool) {
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
