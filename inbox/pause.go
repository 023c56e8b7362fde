package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// PausedGroupPrefix begins the reserved group of an inbox group's control row (see
// PausedGroup). No queue should read a group of that name.
const PausedGroupPrefix = "settle.paused:"

// PausedGroup is the group of group's control row: while a row of the inbox's table is
// in it, the mounts reading group claim nothing new (they finish and settle the rows
// they hold, and keep their leases). The row is an ordinary row of the table (empty
// payload, attempt 1): pausing needs no schema change, but it needs a group column.
func PausedGroup(group string) string { return PausedGroupPrefix + group }

// Pause pauses the mounts reading group, from any process: it inserts group's control
// row (see PausedGroup) unless one is there, so pausing twice is pausing once. The
// mounts see it within a second of their clock. A table without a group column cannot
// be paused: an error says so.
func (ib *Inbox) Pause(ctx context.Context, group string) error {
	d, err := ib.pausable(group)
	if err != nil {
		return err
	}
	paused, err := ib.paused(ctx, d, group)
	if err != nil || paused {
		return err
	}
	s := ib.statements(d)
	vals := map[string]any{"group": PausedGroup(group), "headers": nil, "skew": d.skewArg(0)}
	if _, err := retry(ctx, d, ib.db, func() ([]int64, error) { return insertRows(ctx, d, s, ib.db, dueNow, vals, [][]byte{{}}) }); err != nil {
		return fmt.Errorf("inbox: pause group %q of %s: %w", group, ib.table.Name, err)
	}
	return nil
}

// Resume resumes the mounts reading group: it deletes group's control rows, if any (a
// group not paused is left as it is). The mounts read again within a second of their
// clock.
func (ib *Inbox) Resume(ctx context.Context, group string) error {
	d, err := ib.pausable(group)
	if err != nil {
		return err
	}
	c := ib.table.quoted(d.admin().quote)
	st := compile("DELETE FROM "+c.table+" WHERE "+c.group+" = :group", d.admin().style)
	args := st.bind(map[string]any{"group": PausedGroup(group)})
	if _, err := retry(ctx, d, ib.db, func() (sql.Result, error) { return ib.db.ExecContext(ctx, st.text, args...) }); err != nil {
		return fmt.Errorf("inbox: resume group %q of %s: %w", group, ib.table.Name, err)
	}
	return nil
}

// Paused reports whether group is paused: its control row is in the table. It is one
// SELECT … LIMIT 1, the statement the mounts run once a second.
func (ib *Inbox) Paused(ctx context.Context, group string) (bool, error) {
	d, err := ib.pausable(group)
	if err != nil {
		return false, err
	}
	return ib.paused(ctx, d, group)
}

func (ib *Inbox) paused(ctx context.Context, d dialect, group string) (bool, error) {
	c := ib.table.quoted(d.admin().quote)
	st := compile("SELECT 1 FROM "+c.table+" WHERE "+c.group+" = :group LIMIT 1", d.admin().style)
	args := st.bind(map[string]any{"group": PausedGroup(group)})
	var one int
	err := ib.db.QueryRowContext(ctx, st.text, args...).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inbox: is group %q of %s paused: %w", group, ib.table.Name, err)
	}
	return true, nil
}

// pausable returns the dialect after checking that group can be paused.
func (ib *Inbox) pausable(group string) (dialect, error) {
	d, err := ib.checked(group)
	if err != nil {
		return nil, err
	}
	if ib.table.Group == "" {
		return nil, fmt.Errorf("inbox: table %s has no group column: it cannot be paused (the control row is a row of a reserved group, %q + the group)", ib.table.Name, PausedGroupPrefix)
	}
	if group == "" {
		return nil, fmt.Errorf("inbox: pause: name the group (table %s has a group column)", ib.table.Name)
	}
	return d, nil
}

// Paused reports whether the queue's group is paused (see Inbox.Pause): one SELECT …
// LIMIT 1. A table without a group column is never paused.
func (t *transport) Paused(ctx context.Context) (bool, error) {
	if t.q.ib == nil || t.q.ib.table.Group == "" {
		return false, nil
	}
	return t.q.ib.paused(ctx, t.d, t.q.group)
}
