package inbox

import (
	"fmt"
	"strings"
)

// Table names an inbox table and its columns. The column names are the user's: the
// table is the service's own, and settle reads and writes only the columns named here.
//
// Time columns (RetryAfter, LockedUntil) hold timestamptz on Postgres, DATETIME(6) on
// MySQL/MariaDB, and on SQLite text in the form strftime('%Y-%m-%dT%H:%M:%f+00:00')
// writes (the default a SQLite schema should give the column), which compares in time order. SQLite lets a column
// hold anything, so App.Run refuses a SQLite time column declared with a numeric type,
// with a DEFAULT that writes another form (CURRENT_TIMESTAMP and datetime('now') write
// '2026-12-01 09:44:00', which compares before any time of the inbox's on that day: a row
// parked for an hour would be due at once), or already holding a value in another form.
type Table struct {
	// Attempt names the column counting a row's deliveries, the first included (an
	// integer defaulting to 1). Optional: without it every delivery reads attempt 1, and
	// an attempts cap is refused.
	Attempt string
	// DeadAt names the column holding when a row was dead-lettered (a time column, NULL
	// until then), written by the move to the dead letter with the queue's "now".
	// Optional; when given, a dead-letter table needs it too.
	DeadAt string
	// Group names the column holding which queue a row waits in. Optional: without it
	// the whole table is one queue, and dead letters go to a dead-letter table.
	Group string
	// Headers names the column holding the message's headers as a JSON object of
	// strings ({"trace": "…"}; NULL or '' for none): text on SQLite (TEXT), text or
	// jsonb on PostgreSQL, and TEXT or JSON on MySQL/MariaDB. Publish writes it from
	// settle.Header; a delivery carries it in Message.Headers; the dead-letter move
	// and a replay keep it. The headers a settle.Hooks Move hook adds (under
	// settle.HeaderHookPrefix: a tracer's link to the attempt) are written into it by
	// the put-back, the park and the dead letter, so the next delivery sees them. A
	// value that is not such an object is delivered with no headers and a warning. Optional: without it a row carries no headers, and a
	// Publish with headers is refused.
	Headers string
	// ID names the row's generated primary key. Required.
	ID string
	// LastError names the column holding the last error the handler returned for the
	// row (text, NULL until one), cut at 4 KiB: written at every failed attempt (a retry,
	// a delayed retry) and at the dead letter. Optional; when given, a dead-letter table
	// needs it too.
	LastError string
	// LockedUntil names the lease column: a claimed row is hidden until the time it
	// holds (NULL: not leased). Required.
	LockedUntil string
	// Name is the table's name, optionally schema-qualified ("jobs", "app.jobs").
	// Required.
	Name string
	// Payload names the column holding the message body (bytes). Required.
	Payload string
	// RetryAfter names the column holding when a row comes due (NULL: due). Optional:
	// without it RetryAfter returns the row at once, with a warning.
	RetryAfter string
}

// problems returns every problem of the spec itself.
func (t Table) problems() []error {
	var errs []error
	required := []struct{ field, value string }{
		{"Name", t.Name}, {"ID", t.ID}, {"LockedUntil", t.LockedUntil}, {"Payload", t.Payload},
	}
	for _, r := range required {
		if r.value == "" {
			errs = append(errs, fmt.Errorf("inbox: Table.%s is empty: it is required", r.field))
		}
	}
	for _, name := range append(t.columnNames(), t.Name) {
		if strings.ContainsAny(name, "\"`'\x00;") {
			errs = append(errs, fmt.Errorf("inbox: table or column name %q contains a quote or ';'", name))
		}
	}
	return errs
}

// columnNames returns the columns the spec names, in a fixed order.
func (t Table) columnNames() []string {
	var out []string
	for _, c := range []string{t.ID, t.Group, t.Attempt, t.RetryAfter, t.LockedUntil, t.Payload, t.LastError, t.DeadAt, t.Headers} {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}
