package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// sqlBackend is one database the inbox tests run on.
type sqlBackend struct {
	d    inbox.Dialect
	name string
	// dsn returns the DSN of the test's database (for SQLite a file of its own).
	dsn func(t *testing.T) string
}

// sqlBackends returns SQLite always, and PostgreSQL and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set.
func sqlBackends() []sqlBackend {
	bs := []sqlBackend{{d: inbox.SQLite, name: "SQLite", dsn: func(t *testing.T) string {
		return "file:" + filepath.Join(t.TempDir(), "inbox.db")
	}}}
	if url := os.Getenv("SETTLE_POSTGRES_URL"); url != "" {
		bs = append(bs, sqlBackend{d: inbox.Postgres, name: "Postgres", dsn: func(*testing.T) string { return url }})
	}
	if dsn := os.Getenv("SETTLE_MYSQL_DSN"); dsn != "" {
		// One session time zone for the test's App and the command (see inbox.MySQL).
		if !strings.Contains(dsn, "time_zone") {
			dsn += sep(dsn) + "time_zone=%27%2B00%3A00%27"
		}
		bs = append(bs, sqlBackend{d: inbox.MySQL, name: "MySQL", dsn: func(*testing.T) string { return dsn }})
	}
	return bs
}

// forEachSQL runs fn as a parallel subtest per backend.
func forEachSQL(t *testing.T, fn func(t *testing.T, b sqlBackend)) {
	t.Helper()
	for _, b := range sqlBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// sqlBundle is one inbox test's world: a table of its own, holding dead rows made the
// real way, and the flags that point the command at it.
type sqlBundle struct {
	b     sqlBackend
	db    *sql.DB
	dsn   string
	ib    *inbox.Inbox
	table string
}

// The group the mails are published to, its dead-letter group, and the mails by how the
// handler answers.
const (
	groupEmails = "emails"
	groupDead   = "emails.dead"
)

var (
	okMails          = []string{"ok-1", "ok-2"}
	unavailableMails = []string{"smtp-1", "smtp-2", "smtp-3", "smtp-4"}
	badAddressMails  = []string{"addr-1", "addr-2", "addr-3"}
)

const (
	deadRowsUnavailable = 4
	deadRowsBadAddress  = 3
	deadRows            = deadRowsUnavailable + deadRowsBadAddress
)

func setupSQL(t *testing.T, b sqlBackend) *sqlBundle {
	t.Helper()
	x := &sqlBundle{b: b, dsn: b.dsn(t), table: "settle_cli_" + randHex(6)}
	if b.d == inbox.SQLite {
		// The command opens only a SQLite file that exists: the test's App creates it.
		f, err := os.Create(strings.TrimPrefix(x.dsn, "file:"))
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	db, d, err := openSQL(context.Background(), x.dsn, "the test's DSN")
	if err != nil {
		t.Fatal(err)
	}
	if d != b.d {
		t.Fatalf("openSQL(%q) chose %v, want %v", x.dsn, d, b.d)
	}
	t.Cleanup(func() { _ = db.Close() })
	x.db = db
	x.create(t)
	x.ib = inbox.New(db, d, inbox.Table{Name: x.table, ID: "id", Group: "name", Attempt: "attempt", RetryAfter: "retry_after",
		LockedUntil: "locked_until", Payload: "payload", LastError: "last_error", DeadAt: "dead_at"})
	return x
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// create creates the test's table (and drops it after the test: only it).
func (x *sqlBundle) create(t *testing.T) {
	t.Helper()
	var cols string
	switch x.b.d {
	case inbox.SQLite:
		cols = `id INTEGER PRIMARY KEY, name TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1,
			retry_after TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
			locked_until TEXT, payload BLOB NOT NULL, last_error TEXT, dead_at TEXT`
	case inbox.Postgres:
		cols = `id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, attempt SMALLINT NOT NULL DEFAULT 1,
			retry_after TIMESTAMPTZ NOT NULL DEFAULT now(), locked_until TIMESTAMPTZ,
			payload BYTEA NOT NULL, last_error TEXT, dead_at TIMESTAMPTZ`
	case inbox.MySQL:
		cols = `id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(191) NOT NULL, attempt SMALLINT NOT NULL DEFAULT 1,
			retry_after DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), locked_until DATETIME(6) NULL,
			payload LONGBLOB NOT NULL, last_error TEXT, dead_at DATETIME(6) NULL, KEY (name, retry_after, id)`
	}
	ctx := context.Background()
	if _, err := x.db.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s (%s)", x.table, cols)); err != nil {
		t.Fatalf("create table %s: %v", x.table, err)
	}
	t.Cleanup(func() {
		if _, err := x.db.ExecContext(ctx, "DROP TABLE "+x.table); err != nil {
			t.Errorf("drop table %s: %v", x.table, err)
		}
	})
}

// deadRows publishes the mails and runs an App with an inbox mount (MaxAttempts(2),
// DeadLetter(groupDead), no backoff) until every mail is settled for good: the group
// groupDead then holds deadRows rows, made the real way.
func (x *sqlBundle) deadRows(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	published := 0
	for _, ms := range [][]string{okMails, unavailableMails, badAddressMails} {
		for _, m := range ms {
			if _, err := x.ib.PublishBytes(ctx, groupEmails, []byte(m)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			published++
		}
	}
	runUntilSettled(t, published, func(app *settle.App) {
		app.Mount(x.ib.Queue(groupEmails), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			switch p := string(m.Payload); {
			case strings.HasPrefix(p, "smtp"):
				return errors.New("smtp unavailable")
			case strings.HasPrefix(p, "addr"):
				return errors.New("bad address 42")
			}
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter(groupDead), settle.Backoff(func(int, error) time.Duration { return 0 }))
	})
	if n := x.count(t, groupDead); n != deadRows {
		t.Fatalf("the dead-letter group holds %d rows after the run, want %d", n, deadRows)
	}
}

// runUntilSettled runs an App with the mounts mount makes until n messages are settled
// for good (seen by Config.OnSettled: no sleeps), then stops it.
func runUntilSettled(t *testing.T, n int, mount func(app *settle.App)) {
	t.Helper()
	var mu sync.Mutex
	finals := 0
	done := make(chan struct{})
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			mu.Lock()
			defer mu.Unlock()
			if s.Final() {
				finals++
				if finals == n {
					close(done)
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mount(app)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(ctx) }()
	select {
	case <-done:
	case err := <-runErr:
		t.Fatalf("Run returned before the %d messages were settled: %v", n, err)
	case <-time.After(waitBound):
		t.Fatalf("the %d messages were not all settled within %s", n, waitBound)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// count counts the rows of group, read by the test itself.
func (x *sqlBundle) count(t *testing.T, group string) int {
	t.Helper()
	q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE name = ?", x.table)
	if x.b.d == inbox.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	var n int
	if err := x.db.QueryRowContext(context.Background(), q, group).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", group, err)
	}
	return n
}

// flags are the flags that point the command at the test's table.
func (x *sqlBundle) flags() []string {
	return []string{"--dsn", x.dsn, "--table", x.table, "--group", "name", "--attempt", "attempt", "--retry-after", "retry_after",
		"--last-error", "last_error", "--dead-at", "dead_at"}
}

// settle runs the binary's inbox command with the test's flags then args, stdin given
// (nil: none, so not a terminal).
func (x *sqlBundle) settle(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	return runBin(t, stdin, append(append([]string{"inbox"}, x.flags()...), args...)...)
}

// runBin runs the binary with args.
func runBin(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	return runSettle(t, []string{EnvDSN + "="}, stdin, args...)
}

// okBin runs the binary with args and fails t unless it exits 0.
func okBin(t *testing.T, args ...string) result {
	t.Helper()
	r := runBin(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("settle %s: exit %d, want 0; stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// ok runs the inbox command and fails t unless it exits 0.
func (x *sqlBundle) ok(t *testing.T, args ...string) result {
	t.Helper()
	return okBin(t, append(append([]string{"inbox"}, x.flags()...), args...)...)
}

// expectFail fails t unless r exited with code and says each of says on stderr.
func expectFail(t *testing.T, r result, code int, says ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q does not say %q", r.stderr, s)
		}
	}
}

// The JSON the inbox tests read, as a script would.
type (
	deadLsOut struct {
		ByError []groupOut `json:"by_error"`
		Count   int        `json:"count"`
	}
	rowOut struct {
		Attempt   int64  `json:"attempt"`
		ID        string `json:"id"`
		LastError string `json:"last_error"`
	}
	rowReplayOut struct {
		DryRun   bool     `json:"dry_run"`
		Gone     []string `json:"gone"`
		Replayed []string `json:"replayed"`
		To       string   `json:"to"`
	}
	rowPurgeOut struct {
		Deleted  int64    `json:"deleted"`
		DryRun   bool     `json:"dry_run"`
		Selected []string `json:"selected"`
	}
	viewOut struct {
		Dead    *int64 `json:"dead"`
		Due     int64  `json:"due"`
		Group   string `json:"group"`
		Kind    string `json:"kind"`
		Leased  int64  `json:"leased"`
		Waiting int64  `json:"waiting"`
	}
)

func TestInboxDeadLsCountsTheDeadRowsExactly(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)

		var ls deadLsOut
		decode(t, x.ok(t, "--json", "dead", "ls", groupDead).stdout, &ls)
		if ls.Count != deadRows {
			t.Errorf("count: got %d, want %d", ls.Count, deadRows)
		}
		want := map[string]int{"smtp unavailable": deadRowsUnavailable, "bad address <n>": deadRowsBadAddress}
		if got := counts(ls.ByError); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("by error: got %v, want %v", got, want)
		}

		rows := lines[rowOut](t, x.ok(t, "--json", "dead", "ls", groupDead, "--rows", "--error", "unavailable").stdout)
		if len(rows) != deadRowsUnavailable {
			t.Fatalf("--rows --error unavailable: got %d rows, want %d", len(rows), deadRowsUnavailable)
		}
		for _, r := range rows {
			if r.LastError != "smtp unavailable" || r.Attempt != 2 {
				t.Errorf("row %s: got last error %q, attempt %d; want smtp unavailable, 2", r.ID, r.LastError, r.Attempt)
			}
		}
		var since deadLsOut
		decode(t, x.ok(t, "--json", "dead", "ls", groupDead, "--since", "1h", "--until", time.Now().Add(time.Hour).Format(time.RFC3339)).stdout, &since)
		if since.Count != deadRows {
			t.Errorf("--since 1h: got %d, want %d", since.Count, deadRows)
		}
		var ids deadLsOut
		decode(t, x.ok(t, "--json", "dead", "ls", groupDead, "--id", rows[0].ID, "--id", rows[1].ID).stdout, &ids)
		if ids.Count != 2 {
			t.Errorf("--id twice: got %d, want 2", ids.Count)
		}
		if b.d == inbox.SQLite {
			// A path ending .db is a SQLite DSN too.
			r := x.ok(t, "--json", "dead", "ls", groupDead, "--dsn", strings.TrimPrefix(x.dsn, "file:"))
			var path deadLsOut
			if decode(t, r.stdout, &path); path.Count != deadRows {
				t.Errorf("--dsn PATH.db: got %d, want %d", path.Count, deadRows)
			}
		}
		if out := x.ok(t, "dead", "ls", groupDead).stdout; !strings.Contains(out, fmt.Sprintf("%d dead rows", deadRows)) || !strings.Contains(out, "smtp unavailable") {
			t.Errorf("the table for a person does not say the count and the errors:\n%s", out)
		}

		var view viewOut
		decode(t, x.ok(t, "--json", "view", groupEmails, "--dead", groupDead).stdout, &view)
		if view.Dead == nil || *view.Dead != deadRows || view.Due != 0 || view.Leased != 0 || view.Waiting != 0 {
			t.Errorf("view: got %+v (dead %v), want %d dead and nothing else", view, view.Dead, deadRows)
		}
	})
}

func TestInboxDeadReplayMovesExactlyTheMatchingRowsOnce(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)

		var dry rowReplayOut
		decode(t, x.ok(t, "--json", "dead", "replay", groupDead, "--error", "unavailable", "--to", groupEmails, "--dry-run").stdout, &dry)
		if !dry.DryRun || len(dry.Replayed) != deadRowsUnavailable {
			t.Fatalf("dry run: got %+v, want %d rows that would move", dry, deadRowsUnavailable)
		}
		x.unchanged(t)

		r := x.settle(t, nil, "dead", "replay", groupDead, "--error", "unavailable", "--to", groupEmails)
		expectFail(t, r, exitError, "refusing", "--yes")
		x.unchanged(t)

		var res rowReplayOut
		decode(t, x.ok(t, "--json", "dead", "replay", groupDead, "--error", "unavailable", "--to", groupEmails, "--yes").stdout, &res)
		if res.DryRun || len(res.Replayed) != deadRowsUnavailable || len(res.Gone) != 0 || res.To != groupEmails {
			t.Fatalf("replay: got %+v, want %d rows moved to %s", res, deadRowsUnavailable, groupEmails)
		}
		if n := x.count(t, groupDead); n != deadRowsBadAddress {
			t.Errorf("after the replay the dead-letter group holds %d rows, want %d", n, deadRowsBadAddress)
		}
		if n := x.count(t, groupEmails); n != deadRowsUnavailable {
			t.Errorf("after the replay the group %s holds %d rows, want %d", groupEmails, n, deadRowsUnavailable)
		}
		var view viewOut
		decode(t, x.ok(t, "--json", "view", groupEmails).stdout, &view)
		if view.Due != deadRowsUnavailable {
			t.Errorf("view after the replay: got %d due, want %d", view.Due, deadRowsUnavailable)
		}
		for _, id := range res.Replayed {
			p, err := x.ib.Peek(context.Background(), id, settle.Raw)
			if err != nil || p.Attempt != 1 || p.LastError != "" || !p.DeadAt.IsZero() || p.Group != groupEmails {
				t.Errorf("replayed row %s: got %+v, %v; want attempt 1, no last error nor dead-at, in %s", id, p, err, groupEmails)
			}
		}

		var again rowReplayOut
		decode(t, x.ok(t, "--json", "dead", "replay", groupDead, "--error", "unavailable", "--to", groupEmails, "--yes").stdout, &again)
		if len(again.Replayed) != 0 {
			t.Fatalf("replay again: got %+v, want nothing moved", again)
		}
		if n := x.count(t, groupDead); n != deadRowsBadAddress {
			t.Errorf("after the replay run again the dead-letter group holds %d rows, want %d", n, deadRowsBadAddress)
		}
	})
}

// unchanged fails t unless the dead-letter group still holds every dead row and the
// group none.
func (x *sqlBundle) unchanged(t *testing.T) {
	t.Helper()
	if n := x.count(t, groupDead); n != deadRows {
		t.Fatalf("the dead-letter group holds %d rows, want %d (unchanged)", n, deadRows)
	}
	if n := x.count(t, groupEmails); n != 0 {
		t.Fatalf("the group %s holds %d rows, want 0 (unchanged)", groupEmails, n)
	}
}

func TestInboxDeadPurgeDeletesExactlyTheSelection(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)

		var dry rowPurgeOut
		decode(t, x.ok(t, "--json", "dead", "purge", groupDead, "--error", "bad address", "--dry-run").stdout, &dry)
		if !dry.DryRun || dry.Deleted != 0 || len(dry.Selected) != deadRowsBadAddress {
			t.Fatalf("dry run: got %+v, want %d selected, none deleted", dry, deadRowsBadAddress)
		}
		x.unchanged(t)
		expectFail(t, x.settle(t, nil, "dead", "purge", groupDead), exitError, "refusing")
		x.unchanged(t)

		var p rowPurgeOut
		decode(t, x.ok(t, "--json", "dead", "purge", groupDead, "--error", "bad address", "--yes").stdout, &p)
		if p.Deleted != deadRowsBadAddress {
			t.Fatalf("purge: got %+v, want %d deleted", p, deadRowsBadAddress)
		}
		decode(t, x.ok(t, "--json", "dead", "purge", groupDead, "--error", "bad address", "--yes").stdout, &p)
		if p.Deleted != 0 || len(p.Selected) != 0 {
			t.Fatalf("purge again: got %+v, want nothing", p)
		}
		if n := x.count(t, groupDead); n != deadRowsUnavailable {
			t.Errorf("after the purge the dead-letter group holds %d rows, want %d", n, deadRowsUnavailable)
		}
	})
}

func TestInboxDeadShowDecodesTheRow(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)
		rows := lines[rowOut](t, x.ok(t, "--json", "dead", "ls", groupDead, "--rows", "--error", "bad address", "--limit", "1").stdout)
		if len(rows) != 1 {
			t.Fatalf("--limit 1: got %d rows, want 1", len(rows))
		}
		var p struct {
			Attempt   int64   `json:"attempt"`
			DeadAt    *string `json:"dead_at"`
			Format    string  `json:"format"`
			ID        string  `json:"id"`
			LastError string  `json:"last_error"`
			Payload   string  `json:"payload"`
		}
		decode(t, x.ok(t, "--json", "dead", "show", groupDead, rows[0].ID, "--codec", "raw").stdout, &p)
		if p.ID != rows[0].ID || p.Format != "text" || !strings.HasPrefix(p.Payload, "addr-") || p.LastError != "bad address 42" || p.Attempt != 2 || p.DeadAt == nil {
			t.Errorf("show: got %+v, want the row's text payload, its last error, attempt 2 and dead-at", p)
		}
		expectFail(t, x.settle(t, nil, "dead", "show", groupDead, "999999999"), exitError, "999999999")
	})
}

func TestInboxBadInputFailsWithExitCode1NamingItAndChangesNothing(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)
		withFlag := func(flag, value string, args ...string) []string {
			fs, found := x.flags(), false
			for i := range fs {
				if fs[i] == flag {
					fs[i+1], found = value, true
				}
			}
			if !found {
				fs = append(fs, flag, value)
			}
			return append(append([]string{"inbox"}, fs...), args...)
		}
		replay := []string{"dead", "replay", groupDead, "--to", groupEmails, "--yes"}
		badDSN := map[inbox.Dialect]string{
			inbox.SQLite:   "file:" + filepath.Join(t.TempDir(), "missing.db"),
			inbox.Postgres: "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
			inbox.MySQL:    "nobody@tcp(127.0.0.1:1)/none?timeout=2s",
		}[b.d]
		cases := []struct {
			name string
			args []string
			says []string
		}{
			{"DSNThatDoesNotConnect", withFlag("--dsn", badDSN, replay...), []string{"--dsn"}},
			{"UnknownColumn", withFlag("--last-error", "no_such_column", replay...), []string{"no_such_column"}},
			{"UnknownColumnOnLs", withFlag("--payload", "no_such_body", "dead", "ls", groupDead), []string{"no_such_body"}},
			{"UnknownTable", withFlag("--table", "no_such_table_"+randHex(3), replay...), []string{"no_such_table_"}},
			{"NoTo", append([]string{"inbox"}, append(x.flags(), "dead", "replay", groupDead, "--yes")...), []string{"name the group"}},
			{"IDNotFound", append([]string{"inbox"}, append(x.flags(), append(replay, "--id", "999999999")...)...), []string{"999999999"}},
			{"TimeThatDoesNotParse", append([]string{"inbox"}, append(x.flags(), append(replay, "--since", "yesterday")...)...), []string{"--since", "yesterday"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				expectFail(t, runBin(t, nil, tc.args...), exitError, tc.says...)
			})
		}
		t.Run("ErrorFilterWithoutLastErrorColumn", func(t *testing.T) {
			// The mailer example's table: no last_error nor dead_at column named.
			fs := x.flags()
			fs = append([]string{"inbox"}, fs[:len(fs)-4]...)
			r := okBin(t, append(fs, "--json", "dead", "ls", groupDead)...)
			var ls deadLsOut
			if decode(t, r.stdout, &ls); ls.Count != deadRows {
				t.Errorf("dead ls without the last-error column: got %d, want %d", ls.Count, deadRows)
			}
			expectFail(t, runBin(t, nil, append(fs, "dead", "ls", groupDead, "--error", "smtp")...), exitError, "last-error column")
		})
		x.unchanged(t)
		if b.d == inbox.SQLite {
			if _, err := os.Stat(strings.TrimPrefix(badDSN, "file:")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a missing SQLite file: got %v after the command, want it still missing", err)
			}
		}
		t.Run("NoDSN", func(t *testing.T) {
			expectFail(t, runBin(t, nil, "inbox", "--table", x.table, "dead", "ls", groupDead), exitUsage, EnvDSN)
		})
		t.Run("NoTable", func(t *testing.T) {
			expectFail(t, runBin(t, nil, "inbox", "--dsn", x.dsn, "dead", "ls", groupDead), exitUsage, "--table")
		})
	})
}

func TestInboxConfigFileNamesTheTableAndItsGroups(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		x.deadRows(t)
		conf := fmt.Sprintf(`{"dsn": %q, "inboxes": [
			{"name": "other", "table": {"name": "other_jobs"}},
			{"name": "mailer", "table": {"name": %q, "id": "id", "group": "name", "attempt": "attempt",
				"retry_after": "retry_after", "locked_until": "locked_until", "payload": "payload",
				"last_error": "last_error", "dead_at": "dead_at"},
			 "groups": [%q], "dead": [%q]}]}`, x.dsn, x.table, groupEmails, groupDead)
		path := filepath.Join(t.TempDir(), "settle.json")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		var ls deadLsOut
		decode(t, okBin(t, "inbox", "--config", path, "--inbox", "mailer", "--json", "dead", "ls", groupDead).stdout, &ls)
		if ls.Count != deadRows {
			t.Errorf("dead ls with --config: got %d, want %d", ls.Count, deadRows)
		}
		vs := lines[viewOut](t, okBin(t, "inbox", "--config", path, "--inbox", "mailer", "--json", "stats").stdout)
		if len(vs) != 2 || vs[0].Kind != "group" || vs[0].Group != groupEmails || vs[0].Dead != nil ||
			vs[1].Kind != "dead-letter" || vs[1].Dead == nil || *vs[1].Dead != deadRows {
			t.Errorf("stats with --config: got %+v, want the group %s and its %d dead rows", vs, groupEmails, deadRows)
		}
		expectFail(t, runBin(t, nil, "inbox", "--config", path, "dead", "ls", groupDead), exitError, "--inbox", "mailer", "other")
		expectFail(t, runBin(t, nil, "inbox", "--config", path, "--inbox", "nope", "dead", "ls", groupDead), exitError, "nope")
	})
}

// TestInboxPauseAndResumeSetWhatTheViewShows: settle inbox pause|resume GROUP, the
// console's buttons on the command line.
func TestInboxPauseAndResumeSetWhatTheViewShows(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		x := setupSQL(t, b)
		paused := func() bool {
			var v struct {
				Paused *bool `json:"paused"`
			}
			decode(t, x.ok(t, "--json", "view", groupEmails).stdout, &v)
			return v.Paused != nil && *v.Paused
		}
		if r := x.ok(t, "pause", groupEmails); !strings.Contains(r.stdout, "paused group "+groupEmails) || !paused() {
			t.Fatalf("after pause: %q, paused %v", r.stdout, paused())
		}
		x.ok(t, "pause", groupEmails) // twice is once
		if r := x.ok(t, "resume", groupEmails); !strings.Contains(r.stdout, "resumed") || paused() {
			t.Fatalf("after resume: %q, paused %v", r.stdout, paused())
		}
	})
}
