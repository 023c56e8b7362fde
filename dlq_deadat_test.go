package settle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// A list dead letter has no entry id to date it: it carries HeaderDeadAt, the App's
// clock when it was dead-lettered, in RFC 3339 with milliseconds.
func TestListDeadLetterCarriesDeadAtFromTheAppsClock(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key, dlq := r.Key("jobs"), r.Key("dead")
	if err := settle.NewPublisher(r.Client).PublishList(ctx, key, "job"); err != nil {
		t.Fatal(err)
	}
	rec := sourcetest.NewRecorder()
	app := sourcetest.NewApp(t, rec, nil)
	app.Mount(settle.List(r.Client, key), settle.HandlerFunc(func(context.Context, *settle.Message) error {
		return errors.New("always fails")
	}), settle.MaxAttempts(1), settle.DeadLetter(dlq))
	before := time.Now().Truncate(time.Millisecond)
	stop := sourcetest.StartApp(t, app)
	rec.WaitFor(t, sourcetest.WaitTimeout, "a dead letter", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	vals, err := r.Client.LRange(ctx, dlq, 0, -1).Result()
	if err != nil || len(vals) != 1 {
		t.Fatalf("dead-letter list %q: %v; want one item", vals, err)
	}
	_, headers, _, err := wire.FromEnvelope([]byte(vals[0]))
	if err != nil {
		t.Fatal(err)
	}
	raw := headers[settle.HeaderDeadAt]
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		t.Fatalf("%s = %q: %v; want RFC 3339", settle.HeaderDeadAt, raw, err)
	}
	if len(raw) != len("2006-01-02T15:04:05.000Z") {
		t.Fatalf("%s = %q, want UTC with milliseconds", settle.HeaderDeadAt, raw)
	}
	if at.Before(before) || at.After(after) {
		t.Fatalf("%s = %s, want between %s and %s (the run)", settle.HeaderDeadAt, at, before, after)
	}
}
