package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/show"
)

// ErrRowNotFound reports a row id that is not in the table or dead letter read.
var ErrRowNotFound = errors.New("inbox: row not found")

// GroupView is what one group of an inbox holds, read in one statement at the
// database's "now".
type GroupView struct {
	// Dead counts the rows of the dead letter named (a group of the table, or a
	// dead-letter table); 0 when none was named.
	Dead int64
	// Due counts the rows ready for a claim: not leased, retry_after passed (or NULL).
	Due int64
	// Group is the group read ("" for a table without a group column).
	Group string
	// LeasePassed counts the leased rows whose lease passed: delivered to a worker that
	// never settled them (crashed or hung); the next claim takes them over.
	LeasePassed int64
	// Leased counts the rows in flight: leased to a worker, the lease not passed.
	Leased int64
	// OldestDue is how long the oldest due row has been due (from its retry_after; 0
	// when no row is due, or the table has no retry_after column).
	OldestDue time.Duration
	// Waiting counts the rows parked by a RetryAfter: not leased, retry_after in the
	// future.
	Waiting int64
}

// View returns what group holds (group "" for a table without a group column), and
// how many rows the dead letter dead holds ("" for none: a group of the table when it
// has a group column, else a dead-letter table). A column the table spec names that
// the table (or the dead-letter table) lacks is an error naming it.
func (ib *Inbox) View(ctx context.Context, group, dead string) (*GroupView, error) {
	d, err := ib.checked(group)
	if err != nil {
		return nil, err
	}
	if err := ib.checkAdmin(ctx, d, dead); err != nil {
		return nil, err
	}
	s := ib.table.adminStatements(d.admin(), dead)
	vals := map[string]any{"group": group, "dead": dead, "skew": d.skewArg(0)}
	v := &GroupView{Group: group}
	var oldest sql.NullInt64
	var now int64
	if err := ib.db.QueryRowContext(ctx, s.view.text, s.view.bind(vals)...).Scan(&v.Due, &v.Leased, &v.LeasePassed, &v.Waiting, &oldest, &now); err != nil {
		return nil, fmt.Errorf("inbox: view of group %q of %s: %w", group, ib.table.Name, err)
	}
	if oldest.Valid && now > oldest.Int64 {
		v.OldestDue = time.Duration(now-oldest.Int64) * time.Microsecond
	}
	if dead != "" {
		if err := ib.db.QueryRowContext(ctx, s.count.text, s.count.bind(vals)...).Scan(&v.Dead); err != nil {
			return nil, fmt.Errorf("inbox: count the dead letter %q of %s: %w", dead, ib.table.Name, err)
		}
	}
	return v, nil
}

// Row is one row of an inbox table or of its dead letter, as the table spec names its
// columns (a column the spec does not name reads as its zero value).
type Row struct {
	// Attempt is the row's attempt column (1 without one).
	Attempt int64
	// DeadAt is when the row was dead-lettered (Table.DeadAt; zero: not dead, or no column).
	DeadAt time.Time
	// Group is the row's group ("" without a group column).
	Group string
	// Headers are the row's headers (Table.Headers; empty without the column).
	Headers map[string]string
	// ID is the row's id, as text.
	ID string
	// LastError is the last error its handler returned (Table.LastError).
	LastError string
	// LockedUntil is the row's lease (zero: not leased).
	LockedUntil time.Time
	// Payload is the row's payload, as stored.
	Payload []byte
	// RetryAfter is when the row comes due (zero: due, or no column).
	RetryAfter time.Time

	id any // the id as the driver read it: what the actions bind
}

// PeekedRow is a row with its payload shown for a person.
type PeekedRow struct {
	Row
	// DecodeError says why the payload did not decode with the codec given ("" when it
	// did); Shown then holds its bytes in hex.
	DecodeError string
	// Format says how Shown shows the payload: "json", "text" or "hex".
	Format string
	// Shown is the payload: as JSON for msgpack and JSON (or any codec that decodes into
	// an interface value), as text for raw when it is printable UTF-8, else as hex.
	Shown string
}

// Peek returns the row of the inbox's table whose id (as text) is id, its payload
// decoded by codec (nil: settle.Msgpack) as admin.Peek shows a stream entry's. An id
// not in the table is an error wrapping ErrRowNotFound.
func (ib *Inbox) Peek(ctx context.Context, id string, codec settle.Codec) (*PeekedRow, error) {
	return ib.peek(ctx, "", id, codec)
}

// PeekDead is Peek for a row of the dead letter dead (a group of the table, or a
// dead-letter table): an id that is not in it is an error wrapping ErrRowNotFound.
func (ib *Inbox) PeekDead(ctx context.Context, dead, id string, codec settle.Codec) (*PeekedRow, error) {
	if dead == "" {
		return nil, errors.New("inbox: peek: name the dead letter (a group, or a dead-letter table)")
	}
	return ib.peek(ctx, dead, id, codec)
}

func (ib *Inbox) peek(ctx context.Context, dead, id string, codec settle.Codec) (*PeekedRow, error) {
	d, err := ib.checked("")
	if err != nil {
		return nil, err
	}
	if err := ib.checkAdmin(ctx, d, dead); err != nil {
		return nil, err
	}
	s := ib.table.adminStatements(d.admin(), dead)
	rows, err := ib.readRows(ctx, s.rowsByID, map[string]any{"dead": dead, "id": id})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		where := "table " + ib.table.Name
		if dead != "" {
			where = fmt.Sprintf("dead letter %q of %s", dead, ib.table.Name)
		}
		return nil, fmt.Errorf("%w: %s has no row %s", ErrRowNotFound, where, id)
	}
	p := &PeekedRow{Row: rows[0]}
	p.Format, p.Shown, p.DecodeError = show.Payload(p.Payload, codec)
	return p, nil
}

// DeadRows returns the rows of the dead letter dead (a group of the table, or a
// dead-letter table) that f selects, in id order, at most limit of them (limit <= 0:
// all). The filter is checked as Replay checks it.
func (ib *Inbox) DeadRows(ctx context.Context, dead string, f Filter, limit int) ([]Row, error) {
	d, err := ib.checked("")
	if err != nil {
		return nil, err
	}
	return ib.selection(ctx, d, dead, f, limit)
}

// selection returns the rows of dead that f selects, at most limit (<= 0: all), after
// checking the inbox, dead and f.
func (ib *Inbox) selection(ctx context.Context, d dialect, dead string, f Filter, limit int) ([]Row, error) {
	if dead == "" {
		return nil, errors.New("inbox: name the dead letter (a group, or a dead-letter table)")
	}
	if err := errors.Join(ib.checkAdmin(ctx, d, dead), f.check(ib.table)); err != nil {
		return nil, err
	}
	s := ib.table.adminStatements(d.admin(), dead)
	all, err := ib.readRows(ctx, s.rows, map[string]any{"dead": dead})
	if err != nil {
		return nil, err
	}
	var out []Row
	found := map[string]bool{}
	for _, r := range all {
		if !f.match(r) {
			continue
		}
		found[r.ID] = true
		if limit <= 0 || len(out) < limit {
			out = append(out, r)
		}
	}
	var missing []string
	for _, id := range f.IDs {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the dead letter %q of %s has no rows %s (or they do not match the filter)", ErrRowNotFound, dead, ib.table.Name, strings.Join(missing, ", "))
	}
	return out, nil
}

// readRows runs one of the row selects (see adminStatements.rows).
func (ib *Inbox) readRows(ctx context.Context, st stmt, vals map[string]any) ([]Row, error) {
	var out []Row
	var id, attempt any
	var group, lastError, headers sql.NullString
	var retryAfter, lease, deadAt sql.NullInt64
	var payload []byte
	dest := []any{&id, &group, &attempt, &retryAfter, &lease, &lastError, &deadAt, &payload, &headers}
	micros := func(v sql.NullInt64) time.Time {
		if !v.Valid {
			return time.Time{}
		}
		return time.UnixMicro(v.Int64).UTC()
	}
	err := queryEach(ctx, ib.db, st.text, st.bind(vals), dest, func() {
		own := ownValue(id)
		var hv any
		if headers.Valid {
			hv = headers.String
		}
		h, _ := decodeHeaders(hv) // a garbled column shows as no headers
		out = append(out, Row{
			Attempt: attemptOf(attempt), DeadAt: micros(deadAt), Group: group.String, Headers: h, ID: idString(own), LastError: lastError.String,
			LockedUntil: micros(lease), Payload: append([]byte(nil), payload...), RetryAfter: micros(retryAfter), id: own,
		})
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: read the rows of %s: %w", ib.table.Name, err)
	}
	return out, nil
}

// checkAdmin checks that the table, and the dead-letter table dead names when the table
// has no group column, have every column the spec names.
func (ib *Inbox) checkAdmin(ctx context.Context, d dialect, dead string) error {
	s := ib.statements(d)
	want := ib.table.columnNames()
	errs := []error{checkColumns(ctx, ib.db, s, ib.table.Name, want)}
	if dead != "" && ib.table.Group == "" {
		if strings.ContainsAny(dead, "\"`'\x00;") {
			return fmt.Errorf("inbox: dead-letter table name %q contains a quote or ';'", dead)
		}
		if dead == ib.table.Name {
			return fmt.Errorf("inbox: the dead letter %q is the inbox's own table", dead)
		}
		errs = append(errs, checkColumns(ctx, ib.db, s, dead, want))
	}
	return errors.Join(errs...)
}
