package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
)

func TestValidateRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	db := openEcho(t)
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
		{name: "FlowTableNamesWithAQuote", src: New(db, SQLite, full, WithLimitTable(`lim"its`), WithMarkTable("marks;")).Queue("emails"),
			opts: []settle.MountOption{settle.RateLimit(1, time.Second), settle.Dedupe(time.Hour, func(*settle.Message) string { return "" })},
			want: []string{`WithLimitTable("lim\"its")`, `WithMarkTable("marks;")`}},
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
	db := openEcho(t)
	app, _ := settle.New(settle.Config{})
	app.Mount(New(db, SQLite, cols{}.spec("jobs")).Queue("emails"),
		settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.MaxAttempts(5), settle.DeadLetter("emails.dead"))
	if err := app.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
}
