package inbox

import (
	"fmt"
	"strings"
)

// adminSpec is what the operator's statements (View, Peek, Replay, Purge) differ in per
// dialect.
type adminSpec struct {
	// forUpdate locks the rows a SELECT reads until the transaction ends ("" on SQLite,
	// whose BEGIN IMMEDIATE holds the only write lock).
	forUpdate string
	// micros is a time expression as microseconds since the Unix epoch (a BIGINT).
	micros func(expr string) string
	// now is the statements' "now" (the dialect's, taking :skew).
	now   string
	quote byte
	style placeholderStyle
	// text is an expression as text (to compare an id of any type with a text argument).
	text func(expr string) string
}

// adminStatements are an inbox table's operator statements for one dead letter: a group
// of the table (deadTable empty) or a dead-letter table.
type adminStatements struct {
	// count counts the dead letter's rows.
	count stmt
	// deleteN deletes n rows of the dead letter by id (:id<i>).
	deleteN func(n int) stmt
	// insertN copies n rows of the dead-letter table by id into the inbox's table, due
	// now with attempt 1 (a dead-letter table only).
	insertN func(n int) stmt
	// lockN selects (and locks) the ids of n rows still in the dead letter.
	lockN func(n int) stmt
	// moveN moves n rows of the dead-letter group by id to the group :to, due now with
	// attempt 1 (a dead-letter group only).
	moveN func(n int) stmt
	// rows selects the dead letter's rows (see rowSelect) in id order; rowsByID, the
	// one whose id as text is :id.
	rows     stmt
	rowsByID stmt
	// view counts the rows of :group by state (see View).
	view stmt
}

// adminStatements compiles the operator's statements of t for the dead letter dead (a
// group when t has a group column, else a dead-letter table; "" for the table's own
// rows: rows and rowsByID read the whole table).
func (t Table) adminStatements(a adminSpec, dead string) *adminStatements {
	c := t.quoted(a.quote)
	s := &adminStatements{}
	from, where := c.table, "1 = 1"
	switch {
	case dead != "" && c.group != "":
		where = c.group + " = :dead"
	case dead != "":
		from = quoteWith(dead, a.quote)
	}
	orNull := func(col string, f func(string) string) string {
		if col == "" {
			return "NULL"
		}
		return f(col)
	}
	same := func(s string) string { return s }
	cols := []string{
		c.id, orNull(c.group, same), orNull(c.attempt, same), orNull(c.retryAfter, a.micros),
		a.micros(c.lease), orNull(c.lastError, same), orNull(c.deadAt, a.micros), c.payload, orNull(c.headers, a.text),
	}
	sel := fmt.Sprintf(`SELECT %s FROM %s WHERE %s`, strings.Join(cols, ", "), from, where)
	s.rows = compile(sel+` ORDER BY `+c.id, a.style)
	s.rowsByID = compile(sel+` AND `+a.text(c.id)+` = :id`, a.style)
	s.count = compile(fmt.Sprintf(`SELECT COUNT(*) FROM %s WHERE %s`, from, where), a.style)
	in := func(n int) string { return fmt.Sprintf("%s AND %s IN (%s)", where, c.id, list("id", n)) }
	s.lockN = func(n int) stmt {
		return compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s%s`, c.id, from, in(n), a.forUpdate), a.style)
	}
	s.deleteN = func(n int) stmt { return compile(fmt.Sprintf(`DELETE FROM %s WHERE %s`, from, in(n)), a.style) }

	// fresh is what a replayed row's columns become: due now, attempt 1, not leased, no
	// error, not dead.
	fresh := map[string]string{c.lease: "NULL"}
	for col, v := range map[string]string{c.attempt: "1", c.retryAfter: a.now, c.lastError: "NULL", c.deadAt: "NULL"} {
		if col != "" {
			fresh[col] = v
		}
	}
	if c.group != "" {
		set := []string{c.group + " = :to"}
		for _, col := range []string{c.attempt, c.retryAfter, c.lease, c.lastError, c.deadAt} {
			if v, ok := fresh[col]; ok {
				set = append(set, col+" = "+v)
			}
		}
		s.moveN = func(n int) stmt {
			return compile(fmt.Sprintf(`UPDATE %s SET %s WHERE %s`, c.table, strings.Join(set, ", "), in(n)), a.style)
		}
	} else if dead != "" {
		var into, vals []string
		for _, col := range []string{c.id, c.attempt, c.retryAfter, c.lease, c.payload, c.lastError, c.deadAt, c.headers} {
			if col == "" {
				continue
			}
			into = append(into, col)
			if v, ok := fresh[col]; ok {
				vals = append(vals, v)
			} else {
				vals = append(vals, col)
			}
		}
		s.insertN = func(n int) stmt {
			return compile(fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s`,
				c.table, strings.Join(into, ", "), strings.Join(vals, ", "), from, in(n)), a.style)
		}
	}

	due, waiting := c.lease+" IS NULL", "0"
	oldest := "NULL"
	if c.retryAfter != "" {
		due = fmt.Sprintf("%s IS NULL AND (%s IS NULL OR %s <= %s)", c.lease, c.retryAfter, c.retryAfter, a.now)
		waiting = fmt.Sprintf("COUNT(CASE WHEN %s IS NULL AND %s > %s THEN 1 END)", c.lease, c.retryAfter, a.now)
		oldest = fmt.Sprintf("MIN(CASE WHEN %s IS NULL AND %s <= %s THEN %s END)", c.lease, c.retryAfter, a.now, a.micros(c.retryAfter))
	}
	groupIs := "1 = 1"
	if c.group != "" {
		groupIs = c.group + " = :group"
	}
	s.view = compile(fmt.Sprintf(`SELECT COUNT(CASE WHEN %[1]s THEN 1 END), COUNT(CASE WHEN %[2]s > %[3]s THEN 1 END), COUNT(CASE WHEN %[2]s <= %[3]s THEN 1 END), %[4]s, %[5]s, %[6]s FROM %[7]s WHERE %[8]s`,
		due, c.lease, a.now, waiting, oldest, a.micros(a.now), c.table, groupIs), a.style)
	return s
}
