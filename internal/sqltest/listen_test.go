package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// postgres returns the PostgreSQL backend, or skips the test without one.
func postgres(t *testing.T) backend {
	t.Helper()
	for _, b := range backends() {
		if b.d == inbox.Postgres {
			return b
		}
	}
	t.Skip("SETTLE_POSTGRES_URL is not set")
	return backend{}
}

// listening returns the backend pids of the connections LISTENing on the inbox table's
// channel (their last statement is the LISTEN).
func listening(t *testing.T, db *sql.DB, tb inbox.Table) []any {
	t.Helper()
	return column(t, db, `SELECT pid FROM pg_stat_activity WHERE query = $1`, fmt.Sprintf(`LISTEN "%s"`, tb.Name))
}

// waitListening waits until one connection, other than the one of pid not, LISTENs on
// the table's channel, and returns its pid.
func waitListening(t *testing.T, db *sql.DB, tb inbox.Table, not any) any {
	t.Helper()
	var pid any
	eventually(t, "a connection LISTENing on "+tb.Name, func() bool {
		pids := listening(t, db, tb)
		if len(pids) > 1 {
			t.Fatalf("connections %v LISTEN on %s, want one", pids, tb.Name)
		}
		if len(pids) == 1 && pids[0] != not {
			pid = pids[0]
		}
		return pid != nil
	})
	return pid
}

// listenBundle is a PostgreSQL table, an App whose queue polls once an hour, and a
// publisher on a pool of its own (another process, as far as the App can tell).
type listenBundle struct {
	*testBundle
	handled chan string // each payload handled, with the time since its publish logged
	other   *inbox.Inbox
	sent    map[string]time.Time
}

func setupListen(t *testing.T, opts ...inbox.Option) *listenBundle {
	t.Helper()
	b := postgres(t)
	x := &listenBundle{testBundle: setup(t, b, cols{}), handled: make(chan string, 16), sent: map[string]time.Time{}}
	x.other = inbox.New(ownPool(t, b), b.d, x.tb)
	app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: x.rec.OnSettled}) // the wall clock
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(x.ib.Queue("jobs", append([]inbox.Option{inbox.Poll(never)}, opts...)...), raw(func(_ context.Context, m *settle.Message) error {
		x.handled <- string(m.Payload)
		return nil
	}))
	startApp(t, app)
	return x
}

// publishElsewhere publishes payload through the other pool.
func (x *listenBundle) publishElsewhere(t *testing.T, payload string) {
	t.Helper()
	x.sent[payload] = time.Now()
	if _, err := x.other.PublishBytes(context.Background(), "jobs", []byte(payload)); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// waitHandled waits until the App handled payload, and logs how long after its publish.
func (x *listenBundle) waitHandled(t *testing.T, payload string) {
	t.Helper()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		select {
		case got := <-x.handled:
			if got == payload {
				t.Logf("%s handled %s after its publish", payload, time.Since(x.sent[payload]).Round(time.Microsecond))
				return
			}
		case <-deadline.C:
			t.Fatalf("%s was not handled within %s (the queue polls once an hour)", payload, waitLong)
		}
	}
}

// TestPostgresRowPublishedByAnotherPoolWakesAnIdleQueue: a queue whose poll is an hour
// away claims a row Publish wrote through another *sql.DB at once: the INSERT's
// pg_notify reaches the Inbox's LISTEN connection.
func TestPostgresRowPublishedByAnotherPoolWakesAnIdleQueue(t *testing.T) {
	t.Parallel()
	x := setupListen(t)
	waitListening(t, x.db, x.tb, nil)
	// The first row may still meet the claim the listener's start wakes; the second
	// comes to an idle queue that nothing but a notification wakes.
	for _, p := range []string{"first", "second", "third"} {
		x.publishElsewhere(t, p)
		x.waitHandled(t, p)
	}
}

// TestPostgresListenerReconnectsAfterItsConnectionIsKilled: pg_terminate_backend on the
// LISTEN connection loses it; the queue keeps finding rows (it polls, and the listener,
// once it listens again, wakes every queue of the Inbox for the rows it may have
// missed), a new connection LISTENs, and a row published after that wakes the idle
// queue at once again.
func TestPostgresListenerReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	t.Parallel()
	x := setupListen(t)
	pid := waitListening(t, x.db, x.tb, nil)
	x.publishElsewhere(t, "before")
	x.waitHandled(t, "before")
	var killed bool
	if err := x.db.QueryRowContext(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, killed, err)
	}
	x.publishElsewhere(t, "while-lost")
	x.waitHandled(t, "while-lost")
	again := waitListening(t, x.db, x.tb, pid)
	t.Logf("listening again on backend %d (was %d)", again, pid)
	for _, p := range []string{"after", "after-2"} {
		x.publishElsewhere(t, p)
		x.waitHandled(t, p)
	}
}

// TestPostgresPollOnlyQueueHoldsNoListenConnection: with PollOnly the queue holds no
// LISTEN connection and still finds rows other processes publish, by polling.
func TestPostgresPollOnlyQueueHoldsNoListenConnection(t *testing.T) {
	t.Parallel()
	b := postgres(t)
	x := setup(t, b, cols{})
	other := inbox.New(ownPool(t, b), b.d, x.tb)
	x.run(t, x.ib.Queue("jobs", inbox.PollOnly(), inbox.Poll(20*time.Millisecond)), raw(func(context.Context, *settle.Message) error { return nil }))
	if _, err := other.PublishBytes(context.Background(), "jobs", []byte("p")); err != nil {
		t.Fatal(err)
	}
	x.rec.WaitFor(t, waitLong, "the ack", finals(1))
	if pids := listening(t, x.db, x.tb); len(pids) != 0 {
		t.Fatalf("connections %v LISTEN for a PollOnly queue, want none", pids)
	}
}
