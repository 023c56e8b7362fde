package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
)

func TestValidateRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	full := cols{}.spec("jobs")
	noAttempt := cols{noAttempt: true}.spec("jobs")
	noGroup := cols{noGroup: true}.spec("jobs")
	nop := settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })
	tests := []struct {
		name string
		src  settle.Source
		opts []settle.MountOption
		want []string // every refusal expected, each a substring
	}{
		{name: "MaxAttemptsWithoutDeadLetter", src: New(db, SQLite, full).Queue("emails"),
			opts: []settle.MountOption{settle.MaxAttempts(3)}, want: []string{"MaxAttempts(3) without DeadLetter"}},
		{name: "DeadLetterWithoutMaxAttempts", src: New(db, SQLite, full).Queue("emails"),
			opts: []settle.MountOption{settle.DeadLetter("emails.dead")}, want: []string{`DeadLetter("emails.dead") without MaxAttempts`}},
		{name: "CapWithoutAttemptColumn", src: New(db, SQLite, noAttempt).Queue("emails"),
			opts: []settle.MountOption{settle.MaxAttempts(3), settle.DeadLetter("emails.dead")}, want: []string{"no attempt column"}},
		{name: "DeadLetterIsTheQueuesOwnGroup", src: New(db, SQLite, full).Queue("emails"),
			opts: []settle.MountOption{settle.MaxAttempts(3), settle.DeadLetter("emails")}, want: []string{"read again"}},
		{name: "GroupOnTableWithoutGroupColumn", src: New(db, SQLite, noGroup).Queue("emails"),
			want: []string{"no group column"}},
		{name: "NoGroupOnTableWithGroupColumn", src: New(db, SQLite, full).Queue(""),
			want: []string{"name the group"}},
		{name: "NotBoundToATable", src: New(nil, SQLite, full).Queue("emails"),
			opts: []settle.MountOption{settle.MaxAttempts(3), settle.DeadLetter("emails.dead")}, want: []string{"not bound to a table"}},
		{name: "MissingRequiredSpecFields", src: New(db, SQLite, Table{Name: "jobs"}).Queue(""),
			want: []string{"Table.ID", "Table.LockedUntil", "Table.Payload"}},
		{name: "NoDialect", src: New(db, nil, full).Queue("emails"), want: []string{"no dialect"}},
		{name: "DurableZsetDelayIsRefused", src: New(db, SQLite, full).Queue("emails"),
			opts: []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: "emails.delayed"})}, want: []string{"retry_after column"}},
		{name: "BadOptions", src: New(db, SQLite, full).Queue("emails", Batch(0), Lease(0), Poll(0)),
			want: []string{"Batch(0)", "Lease(0s)", "Poll(0s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			app, err := settle.New(settle.Config{})
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(tt.src, nop, tt.opts...)
			err = app.Validate()
			if err == nil {
				t.Fatalf("Validate: got nil, want refusals %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: got %q, want it to contain %q", err, w)
				}
			}
			var ce *settle.ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("Validate: got %T, want *settle.ConfigError in the chain", err)
			}
		})
	}
}

func TestValidateAcceptsCapWithDeadLetterTogether(t *testing.T) {
	t.Parallel()
	db := openSQLite(t)
	app, _ := settle.New(settle.Config{})
	app.Mount(New(db, SQLite, cols{}.spec("jobs")).Queue("emails"),
		settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.MaxAttempts(5), settle.DeadLetter("emails.dead"))
	if err := app.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
}

func TestOpenNamesEveryMissingColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noRetryAfter: true, noAttempt: true})
		spec := cols{}.spec(tb.Name) // names attempt and retry_after, which the table lacks
		spec.Payload = "body"
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(New(db, b.d, spec).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
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
		app.Mount(New(db, b.d, tb).Queue(""), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
			settle.MaxAttempts(2), settle.DeadLetter(tb.Name+"_missing"))
		err := app.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tb.Name+"_missing") {
			t.Fatalf("Run: got %v, want an error naming the missing dead-letter table", err)
		}
	})
}
