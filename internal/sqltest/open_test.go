package sqltest

import (
	"context"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

func TestOpenNamesEveryMissingColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noRetryAfter: true, noAttempt: true})
		spec := cols{}.spec(tb.Name) // names attempt and retry_after, which the table lacks
		spec.Payload = "body"
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, spec).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		err := app.Run(context.Background())
		if err == nil {
			t.Fatal("Run: got nil, want the missing columns")
		}
		for _, col := range []string{"attempt", "retry_after", "body"} {
			if !strings.Contains(err.Error(), col) {
				t.Errorf("Run: got %q, want it to name column %s", err, col)
			}
		}
	})
}

func TestOpenChecksTheDeadLetterTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noGroup: true})
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, tb).Queue(""), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
			settle.MaxAttempts(2), settle.DeadLetter(tb.Name+"_missing"))
		err := app.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tb.Name+"_missing") {
			t.Fatalf("Run: got %v, want an error naming the missing dead-letter table", err)
		}
	})
}
