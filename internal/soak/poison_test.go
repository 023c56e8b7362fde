package soak

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/ledger"
)

// The poison messages: one panics its handler, one makes its consumer process exit
// (os.Exit in the handler), one does not decode.
const (
	poisonPanic  = "poison-panic"
	poisonExit   = "poison-exit"
	poisonDecode = "poison-undecodable"
)

// poisonFlow is how many ordinary messages are published after the poison ones; they
// must all be acked while the poison messages go round.
const poisonFlow = 200

// publishPoison publishes the poison messages (those of kinds), then poisonFlow
// ordinary ones, recording each in the ledger.
func publishPoison(t *testing.T, h *harness, s subject, kinds ...string) {
	t.Helper()
	ctx := context.Background()
	payload := func(kind, id string) []byte {
		b, err := settle.Msgpack.Marshal(poisonPayload{ID: id, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pub := func(id string, p []byte) {
		if err := h.w.Publish(id); err != nil {
			t.Fatal(err)
		}
		if err := s.publish(ctx, id, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kinds {
		switch k {
		case poisonPanic:
			pub(k, payload("panic", k))
		case poisonExit:
			pub(k, payload("exit", k))
		case poisonDecode:
			pub(k, append([]byte{undecodableByte}, k...))
		}
	}
	for i := range poisonFlow {
		id := fmt.Sprintf("ok%03d", i)
		pub(id, payload("ok", id))
	}
}

// checkAttempts checks the runs of a poison message dead-lettered at the cap: their
// attempts rise (a delivery that died with its process, this message's doing or the
// process-killing one's, spends one without a run) and never pass the cap. The dead
// letter carrying the cap is the oracle's check.
func checkAttempts(t *testing.T, id string, runs []ledger.Event, cap int) {
	t.Helper()
	if len(runs) == 0 {
		t.Fatalf("%s: no handler run", id)
	}
	for i, r := range runs {
		if r.Attempt < 1 || r.Attempt > cap || (i > 0 && r.Attempt <= runs[i-1].Attempt) {
			t.Fatalf("%s: run attempts %v, want rising within 1..%d", id, attemptsOf(runs), cap)
		}
	}
}

func attemptsOf(runs []ledger.Event) []int {
	out := make([]int, len(runs))
	for i, r := range runs {
		out[i] = r.Attempt
	}
	return out
}

// runsOf returns the handler runs of message id, in ledger order.
func runsOf(evs []ledger.Event, id string) []ledger.Event {
	var out []ledger.Event
	for _, e := range evs {
		if e.Kind == ledger.KindRun && e.ID == id {
			out = append(out, e)
		}
	}
	return out
}

// TestPoisonMessagesReachDeadLetterAtTheCap: a message that panics its handler, one that
// makes its consumer process exit and one that does not decode each reach the dead
// letter after exactly the cap's deliveries (5), the crash loop included, while the
// ordinary messages published after them are all acked, some of them while the
// process-killing one is still going round. Two worker processes; a worker that exits
// is restarted. On a Stream with Reclaim and on a ClaimingStream Redis's delivery
// counter counts the crashed deliveries (a reclaimed entry's attempt is its retry-count
// header plus the times Redis delivered it); on a ReliableList the recovery of a dead consumer's processing list counts
// the delivery it lost; on the SQL inbox (PostgreSQL) the claim of a row whose lease
// passed counts it.
func TestPoisonMessagesReachDeadLetterAtTheCap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject func(t *testing.T) subject
		idle    time.Duration
	}{
		{"StreamReclaim", func(t *testing.T) subject { return redisSubject(t, transportStream) }, 500 * time.Millisecond},
		{"ClaimingStream", func(t *testing.T) subject { return redisSubject(t, transportClaiming) }, 500 * time.Millisecond},
		{"ReliableList", func(t *testing.T) subject { return redisSubject(t, transportReliable) }, 500 * time.Millisecond},
		{"InboxPostgres", poisonInboxSubject, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.subject(t)
			s.cfg.Idle, s.cfg.Poison = tc.idle, true
			h := newHarness(t, s.cfg, 1)
			publishPoison(t, h, s, poisonPanic, poisonExit, poisonDecode)
			start := time.Now()
			h.start(0)
			h.start(1)
			h.supervise(plan{deadline: time.Minute}, func(ctx context.Context) (bool, error) {
				return s.drained(ctx, h.consumers)
			})
			took := time.Since(start)
			h.stopAll()

			dead, err := s.dead(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rep := h.check(dead, s.cfg.Cap)
			t.Logf("%s: drained in %s: %s; workers exited on the poison message %d times", tc.name, took.Round(time.Millisecond), rep, h.poisonExits)
			if !rep.OK() {
				t.Fatalf("the ledger does not hold:\n%s", firstProblems(rep, 30))
			}
			evs, err := ledger.Read(h.ledger)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{poisonPanic, poisonExit, poisonDecode} {
				if rep.Final[id] != ledger.StateDeadLettered {
					t.Fatalf("%s ended %q, want %q", id, rep.Final[id], ledger.StateDeadLettered)
				}
				checkAttempts(t, id, runsOf(evs, id), s.cfg.Cap)
			}
			// Every run of the process-killing message exited its process: one exit per run,
			// and the deliveries it crashed are the ones counted to the cap.
			if n := len(runsOf(evs, poisonExit)); h.poisonExits != n || n > s.cfg.Cap {
				t.Fatalf("workers exited %d times on the poison message over %d runs, want one exit per run and at most %d runs", h.poisonExits, n, s.cfg.Cap)
			}
			// Ordinary messages: every one acked (the ledger holds). Those held with the
			// process-killing message when it first killed its process are charged that
			// crash (nothing says which of them ran); then each delivery taken over runs
			// alone, so the process-killing message dies alone and is charged every later
			// crash by itself: only the killer pays, and no ordinary message is
			// dead-lettered.
			acked, collateral := 0, 0
			for id, st := range rep.Final {
				if id[:2] != "ok" {
					continue
				}
				switch st {
				case ledger.StateAcked, ledger.StateAckedUnconfirmed:
					acked++
				case ledger.StateDeadLettered:
					collateral++
				default:
					t.Fatalf("%s ended %q, want acked (or dead-lettered by crashes)", id, st)
				}
			}
			t.Logf("%s: ordinary messages: %d acked, %d dead-lettered by the crashes they shared", tc.name, acked, collateral)
			if collateral > 0 {
				t.Fatalf("%d of %d ordinary messages dead-lettered by crashes they shared, want none: only the killer pays", collateral, poisonFlow)
			}
			exitRuns := runsOf(evs, poisonExit)
			first, last := exitRuns[0].Seq, exitRuns[len(exitRuns)-1].Seq
			during := 0
			for _, e := range evs {
				if e.Kind == ledger.KindSettle && e.Action == "ack" && e.Seq > first && e.Seq < last {
					during++
				}
			}
			if during == 0 {
				t.Fatalf("no ordinary message was acked while the process-killing message went round (ledger lines %d to %d)", first, last)
			}
		})
	}
}

// poisonInboxSubject is inboxSubject whose dead rows are named by the id their payload
// carries (a poison test's payloads are not the bare id) and by their row id, the
// delivery: a row claimed with the process-killing one may die with it every time
// without its handler ever running, so only its row id finds it in the ledger.
func poisonInboxSubject(t *testing.T) subject {
	s := inboxSubject(t)
	db, err := sql.Open("pgx", s.cfg.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s.dead = func(ctx context.Context) ([]ledger.Dead, error) {
		rows, err := db.QueryContext(ctx, `SELECT id, payload, attempt FROM `+s.cfg.Key+` WHERE grp = $1`, s.cfg.DeadLetter)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []ledger.Dead
		for rows.Next() {
			var id int64
			var payload []byte
			var d ledger.Dead
			if err := rows.Scan(&id, &payload, &d.Attempt); err != nil {
				return nil, err
			}
			d.ID, d.Delivery = payloadID(payload), strconv.FormatInt(id, 10)
			out = append(out, d)
		}
		return out, rows.Err()
	}
	return s
}
