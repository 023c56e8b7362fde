package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

var (
	summaryRE   = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), reviewed ([0-9]+)$`)
	publishedRE = regexp.MustCompile(`^published [0-9]+ mails to .*, batch ([0-9a-f]+)\)$`)
)

func TestMailerSettlesEveryMailAndReviewsDeadLetters(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-n", "60", "-review"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	m := summaryRE.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q does not match %s", lines[len(lines)-1], summaryRE)
	}
	if m[1] != "60" || m[4] != m[5] {
		t.Fatalf("got %q, want 60 settled and every dead letter reviewed", lines[len(lines)-1])
	}
}

// A retry's event comes after the retry is written, so the mail's next delivery may
// already be running: that late event must not erase the next delivery from the tally
// (it did, and the run then waited for a settlement it had stopped counting).
func TestTallyCountsAFinalSettlementWhoseRetryEventCameAfterTheNextDelivery(t *testing.T) {
	t.Parallel()
	tl := newTally(1, false)
	tl.claim(mountSend, &settle.Message{ID: "7", Attempt: 1})
	tl.claim(mountSend, &settle.Message{ID: "7", Attempt: 2}) // claimed again once put back
	tl.settled(settle.Settled{Mount: mountSend, ID: "7", Attempt: 1, Action: settle.ActionPutBack})
	tl.settled(settle.Settled{Mount: mountSend, ID: "7", Attempt: 2, Action: settle.ActionAck})
	select {
	case <-tl.done:
	default:
		t.Fatalf("the ack of attempt 2 went uncounted: %s", tl.summary())
	}
	if got, want := tl.summary(), "settled 1: acked 1, dropped 0, dead-lettered 0, reviewed 0"; got != want {
		t.Fatalf("tally %q, want %q", got, want)
	}
}

// Only this run's applied settlements count, a park is not final, and with the review
// mount the run ends once every dead letter is reviewed.
func TestTallyCountsOnlyItsOwnAppliedSettlementsAndWaitsForReviews(t *testing.T) {
	t.Parallel()
	tl := newTally(2, true)
	tl.settled(settle.Settled{Mount: mountSend, ID: "other", Attempt: 1, Action: settle.ActionAck}) // another run's
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 1, Action: settle.ActionAck, Err: errors.New("the write failed")})
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 2})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 2, Action: settle.ActionPark})
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 3})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 3, Action: settle.ActionAck})
	tl.claim(mountSend, &settle.Message{ID: "2", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountSend, ID: "2", Attempt: 1, Action: settle.ActionDeadLetter})
	select {
	case <-tl.done:
		t.Fatal("done before the dead letter was reviewed")
	default:
	}
	tl.claim(mountReview, &settle.Message{ID: "2", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountReview, ID: "2", Attempt: 1, Action: settle.ActionAck})
	select {
	case <-tl.done:
	default:
		t.Fatalf("not done after the review: %s", tl.summary())
	}
	if got, want := tl.summary(), "settled 2: acked 1, dropped 0, dead-lettered 1, reviewed 1"; got != want {
		t.Fatalf("tally %q, want %q", got, want)
	}
}

// oldSQLiteSchema is mail_jobs as the mailer created it before last_error and dead_at.
const oldSQLiteSchema = `CREATE TABLE mail_jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    locked_until TEXT,
    payload BLOB NOT NULL)`

// A mail dead-lettered at its fifth failure keeps that failure's error and when it died,
// so that an operator can list and replay the dead letters by error; on SQLite the
// table is one created before those columns, which the mailer adds. It runs on a fresh
// SQLite file, and on the shared mail_jobs of Postgres and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set (it deletes the dead rows it made).
func TestDeadMailsCarryTheirLastErrorAndWhenTheyDied(t *testing.T) {
	t.Parallel()
	sqlite := "file:" + filepath.Join(t.TempDir(), "mailer.db")
	dsns := map[string]string{"SQLite": sqlite}
	if url := os.Getenv("SETTLE_POSTGRES_URL"); url != "" {
		dsns["Postgres"] = url
	} else {
		t.Log("SETTLE_POSTGRES_URL not set: Postgres skipped")
	}
	if dsn := os.Getenv("SETTLE_MYSQL_DSN"); dsn != "" {
		dsns["MySQL"] = dsn
	} else {
		t.Log("SETTLE_MYSQL_DSN not set: MySQL/MariaDB skipped")
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, dialect, err := openSQL(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if dsn == sqlite {
				if _, err := db.ExecContext(ctx, oldSQLiteSchema); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			var stdout, stderr bytes.Buffer
			if err := run(ctx, []string{"-n", "100", "-dsn", dsn}, &stdout, &stderr); err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			pub, sum := publishedRE.FindStringSubmatch(lines[0]), summaryRE.FindStringSubmatch(lines[len(lines)-1])
			if pub == nil || sum == nil {
				t.Fatalf("output %q: want the published line first and the summary last", stdout.String())
			}
			dead, _ := strconv.Atoi(sum[4])
			if dead == 0 {
				t.Fatalf("%s: no mail was dead-lettered; pick -n or -seed so that some are", sum[0])
			}

			ib := inbox.New(db, dialect, spec)
			rows, err := ib.DeadRows(ctx, groupDead, inbox.Filter{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			var ours []string
			for _, r := range rows {
				var mail Mail
				if err := settle.Msgpack.Unmarshal(r.Payload, &mail); err != nil || mail.Batch != pub[1] {
					continue // another run's
				}
				ours = append(ours, r.ID)
				if !strings.Contains(r.LastError, errUnavailable.Error()) && !strings.Contains(r.LastError, errBusy.Error()) {
					t.Errorf("dead row %s: last error %q, want its fifth failure's (%q or %q)", r.ID, r.LastError, errUnavailable, errBusy)
				}
				if r.DeadAt.Before(start.Add(-time.Minute)) || r.DeadAt.After(time.Now().Add(time.Minute)) {
					t.Errorf("dead row %s: dead at %v, want during the run (from %v)", r.ID, r.DeadAt, start)
				}
			}
			if len(ours) != dead {
				t.Errorf("%d dead rows of batch %s in %s, want the summary's %d", len(ours), pub[1], groupDead, dead)
			}
			if _, err := ib.Purge(ctx, groupDead, inbox.Filter{IDs: ours}); err != nil {
				t.Errorf("delete the dead rows this test made: %v", err)
			}
		})
	}
}

// TestTheMailerCreatesTheDueIndexSoTheInboxDoesNotWarn: the index the README
// recommends is made, so the inbox's warning of a missing one (a Warn when a mount
// starts) is not in the mailer's log.
func TestTheMailerCreatesTheDueIndexSoTheInboxDoesNotWarn(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dsn := "file:" + filepath.Join(t.TempDir(), "mailer.db") // a fresh table, without the index
	if err := run(context.Background(), []string{"-n", "5", "-dsn", dsn}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "no index led") {
		t.Fatalf("the inbox warns of a missing index:\n%s", stderr.String())
	}
}
