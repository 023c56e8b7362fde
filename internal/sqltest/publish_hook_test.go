package sqltest

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// publishes records what an inbox's publish hook saw: each Publishing and the id and
// error its completion was given.
type publishes struct {
	mu   sync.Mutex
	seen []settle.Publishing
	ids  []string
	errs []error
}

// hookedInbox makes a table of c on b and an inbox of it whose publish hook adds the
// header name=value and records what it sees.
func hookedInbox(t *testing.T, b backend, c cols, name, value string) (*sql.DB, inbox.Table, *inbox.Inbox, *publishes) {
	t.Helper()
	db := b.open(t)
	tb := createTable(t, b, db, c)
	rec := &publishes{}
	return db, tb, inbox.New(db, b.d, tb, inbox.WithPublishHook(rec.hook(name, value))), rec
}

// hook adds the header name=value to each publish and records it.
func (p *publishes) hook(name, value string) settle.PublishHook {
	return func(_ context.Context, pub *settle.Publishing) func(string, error) {
		pub.Headers[name] = value
		p.mu.Lock()
		p.seen = append(p.seen, *pub)
		p.mu.Unlock()
		return func(id string, err error) {
			p.mu.Lock()
			p.ids, p.errs = append(p.ids, id), append(p.errs, err)
			p.mu.Unlock()
		}
	}
}

// An inbox's publish hook is called as a Redis Publisher's is: before the insert, its
// headers written to the row beside the caller's, in Publish, PublishTx and PublishMany
// (one call for the rows of one INSERT), and its completion is given the row's id.
func TestTheInboxPublishHookAddsItsHeadersToTheRowAndHearsItsID(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db, tb, ib, rec := hookedInbox(t, b, cols{headers: true}, "traceparent", "00-t-01")
		ctx := context.Background()
		id, err := ib.Publish(ctx, "jobs", "one", settle.Header("tenant", "acme"))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		txID, err := ib.PublishTx(ctx, tx, "jobs", "two")
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		many, err := ib.PublishMany(ctx, "jobs", []any{"three", "four"})
		if err != nil {
			t.Fatal(err)
		}
		for _, rowID := range append([]int64{id, txID}, many...) {
			row, err := ib.Peek(ctx, strconv.FormatInt(rowID, 10), nil)
			if err != nil || row.Headers["traceparent"] != "00-t-01" {
				t.Fatalf("row %d = %+v, %v: want the hook's header", rowID, row, err)
			}
		}
		if row, _ := ib.Peek(ctx, strconv.FormatInt(id, 10), nil); row.Headers["tenant"] != "acme" {
			t.Fatalf("row %d has headers %v, want the caller's beside the hook's", id, row.Headers)
		}
		want := []string{strconv.FormatInt(id, 10), strconv.FormatInt(txID, 10), ""}
		if len(rec.seen) != 3 || len(rec.ids) != 3 {
			t.Fatalf("hook called %d times, completed %d: want 3 and 3", len(rec.seen), len(rec.ids))
		}
		for i, p := range rec.seen {
			if p.Kind != "table" || p.Key != tb.Name || rec.ids[i] != want[i] || rec.errs[i] != nil {
				t.Fatalf("publish %d: hook saw %s %q, completed with %q, %v; want table %q, %q, nil", i, p.Kind, p.Key, rec.ids[i], rec.errs[i], tb.Name, want[i])
			}
		}
	})
}

// A publish hook's headers have nowhere to go on a table without a headers column: the
// row is written without them (nothing is linked), and the hook still completes.
func TestTheInboxPublishHookIsHeardButWritesNoHeadersWithoutAColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		_, _, ib, rec := hookedInbox(t, b, cols{}, "traceparent", "00-t-01")
		id, err := ib.Publish(context.Background(), "jobs", "one")
		if err != nil {
			t.Fatalf("Publish with a hook on a table without a headers column: %v", err)
		}
		if len(rec.ids) != 1 || rec.ids[0] != strconv.FormatInt(id, 10) || rec.errs[0] != nil {
			t.Fatalf("completions %v %v, want the row's id %d", rec.ids, rec.errs, id)
		}
	})
}

// A hook that adds a header with settle's reserved prefix fails the publish, as a
// caller's would: nothing is written, and its completion hears why.
func TestAnInboxPublishHooksReservedHeaderIsRefused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db, tb, ib, rec := hookedInbox(t, b, cols{headers: true}, settle.HeaderPrefix+"mine", "x")
		if _, err := ib.Publish(context.Background(), "jobs", "one"); err == nil {
			t.Fatal("Publish with a reserved hook header succeeded, want a refusal")
		}
		if len(rec.errs) != 1 || rec.errs[0] == nil {
			t.Fatalf("completions %v, want one with the refusal", rec.errs)
		}
		if rows := readRows(t, b, db, tb); len(rows) != 0 {
			t.Fatalf("rows %+v after a refused publish, want none", rows)
		}
	})
}
