package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// readmeSQL returns the statements of the README's ```sql blocks after "### Schema"
// (in the SQL table inbox section): the first block's, per dialect (its "-- PostgreSQL",
// "-- MySQL …" and "-- SQLite …" parts), and the second block's (the PostgreSQL trigger),
// comments dropped, with table replacing mail_jobs.
func readmeSQL(t *testing.T, table string) (schema map[inbox.Dialect][]string, trigger []string) {
	t.Helper()
	blocks := readmeBlocks(t, "Schema", 2)
	for i := range blocks {
		blocks[i] = strings.ReplaceAll(blocks[i], "mail_jobs", table)
	}
	return byDialect(blocks[0]), statements(blocks[1])
}

// readmeBlocks returns the first n ```sql blocks of the README after its "### heading".
func readmeBlocks(t testing.TB, heading string, n int) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### "+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no ### %s section", heading)
	}
	var blocks []string
	for len(blocks) < n {
		_, rest, ok := strings.Cut(section, "```sql\n")
		if !ok {
			t.Fatalf("README.md's %s section has %d ```sql blocks, want %d", heading, len(blocks), n)
		}
		block, after, _ := strings.Cut(rest, "```")
		blocks, section = append(blocks, block), after
	}
	return blocks
}

// byDialect splits a ```sql block of the README into its statements per dialect (its
// "-- PostgreSQL", "-- MySQL …" and "-- SQLite …" parts).
func byDialect(block string) map[inbox.Dialect][]string {
	schema := map[inbox.Dialect][]string{}
	var d inbox.Dialect
	for _, line := range strings.SplitAfter(block, "\n") {
		switch {
		case strings.HasPrefix(line, "-- PostgreSQL"):
			d = inbox.Postgres
		case strings.HasPrefix(line, "-- MySQL"):
			d = inbox.MySQL
		case strings.HasPrefix(line, "-- SQLite"):
			d = inbox.SQLite
		}
		if d != nil {
			schema[d] = append(schema[d], line)
		}
	}
	for d, lines := range schema {
		schema[d] = statements(strings.Join(lines, ""))
	}
	return schema
}

// flowNames are the names of a test's flow tables.
type flowNames struct{ limits, marks string }

// opts are the inbox options that name them.
func (n flowNames) opts() []inbox.InboxOption {
	return []inbox.InboxOption{inbox.WithLimitTable(n.limits), inbox.WithMarkTable(n.marks)}
}

// flowTables creates, on b, the README's flow tables ("Flow limits and Dedupe on the
// inbox": the limit and mark tables, indexes included) under unique names, drops them
// after the test, and returns their names.
func flowTables(t testing.TB, b backend, db *sql.DB) flowNames {
	t.Helper()
	block := readmeBlocks(t, "Flow limits and Dedupe on the inbox", 1)[0]
	limits, marks := uniqueName("settle_limits"), uniqueName("settle_marks")
	block = strings.NewReplacer(inbox.DefaultLimitTable, limits, inbox.DefaultMarkTable, marks).Replace(block)
	ctx := context.Background()
	q := quoteFor(b.d)
	for _, st := range byDialect(block)[b.d] {
		if _, err := db.ExecContext(ctx, st); err != nil {
			t.Fatalf("the README's flow tables: %v\n%s", err, st)
		}
	}
	t.Cleanup(func() {
		for _, name := range []string{limits, marks} {
			if _, err := db.ExecContext(ctx, "DROP TABLE "+q(name)); err != nil {
				t.Errorf("drop table %s: %v", name, err)
			}
		}
	})
	return flowNames{limits: limits, marks: marks}
}

// statements splits SQL text into its statements, dropping -- comments: a ';' ends a
// statement outside quotes and $$ bodies.
func statements(text string) []string {
	var out []string
	var b strings.Builder
	quoted, dollar := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case !quoted && !dollar && strings.HasPrefix(text[i:], "--"):
			for i < len(text) && text[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
			continue
		case !quoted && strings.HasPrefix(text[i:], "$$"):
			dollar = !dollar
			b.WriteString("$$")
			i++
			continue
		case c == '\'' && !dollar:
			quoted = !quoted
		case c == ';' && !quoted && !dollar:
			if st := strings.TrimSpace(b.String()); st != "" {
				out = append(out, st)
			}
			b.Reset()
			continue
		}
		b.WriteByte(c)
	}
	if st := strings.TrimSpace(b.String()); st != "" {
		out = append(out, st)
	}
	return out
}

// TestReadmeSchemaRunsOnEveryDialect: the README's schema, index included, creates a
// table on each dialect that a queue opens (the SQLite time columns pass the check) and
// runs on, polling once an hour: a row inserted with plain SQL is retried after 50 ms
// (the idle queue claims it as it comes due) and acked. On PostgreSQL the README's
// trigger then makes a row inserted with plain SQL through another pool wake the idle
// queue.
func TestReadmeSchemaRunsOnEveryDialect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		name := uniqueName("settle_readme")
		schema, trigger := readmeSQL(t, name)
		ctx := context.Background()
		q := quoteFor(b.d)
		for _, st := range schema[b.d] {
			if _, err := db.ExecContext(ctx, st); err != nil {
				t.Fatalf("the README's schema: %v\n%s", err, st)
			}
		}
		t.Cleanup(func() {
			if _, err := db.ExecContext(ctx, "DROP TABLE "+q(name)); err != nil {
				t.Errorf("drop table %s: %v", name, err)
			}
		})
		insert := func(db *sql.DB, payload string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, "INSERT INTO "+q(name)+" (name, payload) VALUES ('jobs', "+placeholder(b.d, 1)+")", []byte(payload)); err != nil {
				t.Fatalf("insert: %v", err)
			}
		}
		insert(db, "first")

		tb := cols{}.spec(name)
		app, err := settle.New(settle.Config{Logger: quietLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		handled := make(chan string, 4)
		app.Mount(inbox.New(db, b.d, tb).Queue("jobs", inbox.Poll(never)), raw(func(_ context.Context, m *settle.Message) error {
			handled <- fmt.Sprintf("%s@%d", m.Payload, m.Attempt)
			if m.Attempt == 1 && string(m.Payload) == "first" {
				return settle.RetryAfter(50*time.Millisecond, errors.New("busy"))
			}
			return nil
		}))
		startApp(t, app)
		want := []string{"first@1", "first@2"}
		if b.d == inbox.Postgres {
			for _, st := range trigger {
				if _, err := db.ExecContext(ctx, st); err != nil {
					t.Fatalf("the README's trigger: %v\n%s", err, st)
				}
			}
			t.Cleanup(func() {
				if _, err := db.ExecContext(ctx, "DROP FUNCTION "+name+"_notify() CASCADE"); err != nil {
					t.Errorf("drop the trigger's function: %v", err)
				}
			})
		}
		for i, w := range want {
			select {
			case got := <-handled:
				if got != w {
					t.Fatalf("delivery %d: got %s, want %s", i+1, got, w)
				}
			case <-time.After(waitLong):
				t.Fatalf("delivery %d (%s) did not come within %s (the queue polls once an hour)", i+1, w, waitLong)
			}
		}
		if b.d != inbox.Postgres {
			return
		}
		waitListening(t, db, tb, nil)
		insert(ownPool(t, b), "by-the-service")
		select {
		case got := <-handled:
			if got != "by-the-service@1" {
				t.Fatalf("got %s, want by-the-service@1", got)
			}
		case <-time.After(waitLong):
			t.Fatalf("the row inserted through the trigger did not wake the queue within %s", waitLong)
		}
	})
}
