package console_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver of the browser test's inbox
	_ "modernc.org/sqlite"             // the SQLite driver of the inbox tests

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/inbox"
)

// mailSchema is the mail table of the inbox tests, per dialect (%s: its name, replaced).
var mailSchema = map[inbox.Dialect]string{
	inbox.SQLite: `CREATE TABLE %s (id INTEGER PRIMARY KEY, name TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1,
		retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')), locked_until TEXT,
		payload BLOB NOT NULL, last_error TEXT, dead_at TEXT)`,
	inbox.Postgres: `CREATE TABLE %s (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, attempt SMALLINT NOT NULL DEFAULT 1,
		retry_after TIMESTAMPTZ NOT NULL DEFAULT now(), locked_until TIMESTAMPTZ, payload BYTEA NOT NULL,
		last_error TEXT, dead_at TIMESTAMPTZ)`,
}

// mailInbox makes a mail inbox table of the test's own (SQLite in a temp dir, or on the
// PostgreSQL dsn names, dropped when the test ends) holding rows dead-lettered the real
// way: two bounced at the cap of 2 attempts into the group emails.dead, one sent.
func mailInbox(t *testing.T, d inbox.Dialect, dsn string) *inbox.Inbox {
	t.Helper()
	ib, _ := mailInboxDB(t, d, dsn)
	return ib
}

// mailInboxDB is mailInbox and its database.
func mailInboxDB(t *testing.T, d inbox.Dialect, dsn string) (*inbox.Inbox, *sql.DB) {
	t.Helper()
	driver := "pgx"
	if d == inbox.SQLite {
		driver, dsn = "sqlite", "file:"+filepath.Join(t.TempDir(), "mail.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "console_mail_" + hex.EncodeToString(b[:])
	if _, err := db.Exec(strings.ReplaceAll(mailSchema[d], "%s", name)); err != nil {
		t.Fatal(err)
	}
	if d != inbox.SQLite {
		t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE ` + name) })
	}
	ib := inbox.New(db, d, inbox.Table{Name: name, ID: "id", Group: "name", Attempt: "attempt", RetryAfter: "retry_after",
		LockedUntil: "locked_until", Payload: "payload", LastError: "last_error", DeadAt: "dead_at"})
	ctx := context.Background()
	for _, to := range []string{"ok@example.com", "bounce-1@example.com", "bounce-2@example.com"} {
		if _, err := ib.Publish(ctx, "emails", map[string]string{"to": to, "subject": "Your refund"}); err != nil {
			t.Fatal(err)
		}
	}
	runApp(t, 3, 0, func(app *settle.App) {
		app.Mount(ib.Queue("emails", inbox.Poll(20*time.Millisecond)), settle.Typed(func(_ context.Context, _ *settle.Message, m map[string]string) error {
			if strings.HasPrefix(m["to"], "bounce") {
				return errors.New("smtp 550: mailbox unavailable")
			}
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter("emails.dead"), noBackoff)
	})
	return ib, db
}

// inboxConsole serves a console of the mail inbox alone (SQLite).
func inboxConsole(t *testing.T, readOnly bool) (*inbox.Inbox, string, *http.Client) {
	t.Helper()
	ib, _, page, cl := inboxConsoleDB(t, readOnly)
	return ib, page, cl
}

// inboxConsoleDB is inboxConsole and the inbox's database.
func inboxConsoleDB(t *testing.T, readOnly bool) (*inbox.Inbox, *sql.DB, string, *http.Client) {
	t.Helper()
	ib, db := mailInboxDB(t, inbox.SQLite, "")
	w := &world{}
	srv, cl := w.serve(t, console.Options{Mounts: []console.Mount{}, ReadOnly: readOnly,
		Inboxes: []console.Inbox{{Name: "mailer", Inbox: ib, Groups: []string{"emails"}, Dead: []string{"emails.dead"}}}})
	return ib, db, srv.URL + "/inboxes/mailer", cl
}

var rowIDRe = regexp.MustCompile(`<tr data-id="([^"]+)"`)

func deadRowIDs(t *testing.T, ib *inbox.Inbox) []string {
	t.Helper()
	rows, err := ib.DeadRows(context.Background(), "emails.dead", inbox.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(rows))
	for k, r := range rows {
		ids[k] = r.ID
	}
	return ids
}

func TestInboxPageListsDeadRowsAndReplaysTheSelectedToTheGroupChosen(t *testing.T) {
	t.Parallel()
	ib, page, cl := inboxConsole(t, false)
	_, body := get(t, cl, page)
	shown := rowIDRe.FindAllStringSubmatch(body, -1)
	ids := deadRowIDs(t, ib)
	if len(shown) != 2 || len(ids) != 2 || !strings.Contains(body, "smtp 550: mailbox unavailable") {
		t.Fatalf("the inbox page lists %d dead rows (the dead letter holds %v), want 2 with their error:\n%s", len(shown), ids, body)
	}
	form := url.Values{"csrf": {token(t, body)}, "scope": {"selected"}, "id": {ids[1]}, "dead": {"emails.dead"}, "to": {"emails"}}
	if _, body := post(t, cl, page+"/replay", form); !strings.Contains(body, `<strong id="confirm-count">1</strong>`) {
		t.Fatalf("no confirmation that 1 row moves:\n%s", body)
	}
	form.Set("confirm", "yes")
	if _, body := post(t, cl, page+"/replay", form); !strings.Contains(body, `Replayed 1 dead row of the 1 confirmed from emails.dead to group &#34;emails&#34;`) {
		t.Fatalf("the replay's result:\n%s", body)
	}
	v, err := ib.View(context.Background(), "emails", "emails.dead")
	if err != nil || v.Due != 1 || v.Dead != 1 || deadRowIDs(t, ib)[0] != ids[0] {
		t.Fatalf("after the replay: %+v, %v; want the selected row due in emails and the other still dead", v, err)
	}
	if _, body := get(t, cl, page+"/dead/emails.dead/"+ids[0]); !strings.Contains(body, "bounce-") || !strings.Contains(body, "smtp 550") {
		t.Fatalf("the dead row's page lacks its payload or error:\n%s", body)
	}
}

func TestInboxGroupPausesAndResumesFromTheConsole(t *testing.T) {
	t.Parallel()
	ib, page, cl := inboxConsole(t, false)
	_, body := get(t, cl, page)
	tok := token(t, body)
	if _, body := post(t, cl, page+"/pause", url.Values{"csrf": {tok}, "group": {"emails"}}); !strings.Contains(body, "Paused group") {
		t.Fatalf("pause:\n%s", body)
	}
	if paused, err := ib.Paused(context.Background(), "emails"); err != nil || !paused {
		t.Fatalf("after pause: %v, %v", paused, err)
	}
	post(t, cl, page+"/resume", url.Values{"csrf": {tok}, "group": {"emails"}})
	if paused, err := ib.Paused(context.Background(), "emails"); err != nil || paused {
		t.Fatalf("after resume: %v, %v", paused, err)
	}
	if status, _ := post(t, cl, page+"/pause", url.Values{"csrf": {tok}, "group": {"other"}}); status != http.StatusBadRequest {
		t.Fatalf("pause of a group the inbox does not name = %d, want 400", status)
	}
}

func TestInboxPurgeIsRefusedReadOnlyAndOtherwiseDeletesTheMatching(t *testing.T) {
	t.Parallel()
	ib, page, cl := inboxConsole(t, true)
	form := url.Values{"scope": {"matching"}, "dead": {"emails.dead"}, "confirm": {"yes"}}
	if status, _ := post(t, cl, page+"/purge", form); status != http.StatusForbidden || len(deadRowIDs(t, ib)) != 2 {
		t.Fatalf("a read-only purge = %d, want 403 and both rows kept", status)
	}
	ib, page, cl = inboxConsole(t, false)
	_, body := get(t, cl, page)
	form.Set("csrf", token(t, body))
	form.Set("error", "550")
	form.Del("confirm")
	_, body = post(t, cl, page+"/purge", form)
	if _, body := post(t, cl, page+"/purge", confirmation(t, body)); !strings.Contains(body, "Purged 2 dead rows") || len(deadRowIDs(t, ib)) != 0 {
		t.Fatalf("purge of the matching:\n%s", body)
	}
}

// TestAConfirmedActionOnDeadRowsActsOnWhatWasShownNotOnArrivals is rule 1 of issue 23
// for an inbox's dead rows in the console (admin's table DeadLetterStore): rows that die
// between the confirmation and the click are left alone, with each filter.
func TestAConfirmedActionOnDeadRowsActsOnWhatWasShownNotOnArrivals(t *testing.T) {
	t.Parallel()
	for name, filter := range map[string]url.Values{"none": {}, "error": {"error": {"550"}}, "reason": {"reason": {"mailbox unavail"}}} {
		for _, verb := range []string{"purge", "replay"} {
			t.Run(name+"/"+verb, func(t *testing.T) {
				t.Parallel()
				ib, db, page, cl := inboxConsoleDB(t, false)
				_, body := get(t, cl, page)
				form := url.Values{"csrf": {token(t, body)}, "scope": {"matching"}, "dead": {"emails.dead"}, "to": {"emails"}}
				for k, v := range filter {
					form[k] = v
				}
				_, body = post(t, cl, page+"/"+verb, form)
				if !strings.Contains(body, `<strong id="confirm-count">2</strong>`) {
					t.Fatalf("no confirmation of 2:\n%s", body)
				}
				for k := 0; k < 3; k++ { // they die before the click
					if _, err := db.Exec(`INSERT INTO ` + ib.Table().Name + ` (name, payload, last_error) VALUES ('emails.dead', x'00', 'smtp 550: mailbox unavailable (late)')`); err != nil {
						t.Fatal(err)
					}
				}
				_, body = post(t, cl, page+"/"+verb, confirmation(t, body))
				if !strings.Contains(body, "2 dead rows of the 2 confirmed") {
					t.Fatalf("the result:\n%s", body)
				}
				if left := len(deadRowIDs(t, ib)); left != 3 {
					t.Fatalf("%d dead rows left, want the 3 that died after the confirmation", left)
				}
			})
		}
	}
}
