package inbox

import (
	"fmt"
	"strings"
)

// dueKind is when a published row comes due.
type dueKind int

const (
	dueNow   dueKind = iota // the database's now
	dueAfter                // now + :delay (the dialect's duration argument)
	dueAt                   // :at, microseconds since the Unix epoch
)

// publishRows returns the INSERT of n published rows: :group, each row's :payload<i>,
// :headers (a Headers column), attempt 1, retry_after as due says (a table without the
// column takes dueNow only); with RETURNING id where the dialect has it (b.returning),
// else the caller reads LastInsertId.
func (c quotedTable) publishRows(b batchSpec) func(n int, due dueKind) stmt {
	return func(n int, due dueKind) stmt {
		// before and after are the values of the columns before and after the payload.
		var cols, before, after []string
		if c.group != "" {
			cols, before = append(cols, c.group), append(before, ":group")
		}
		cols = append(cols, c.payload)
		if c.headers != "" {
			cols, after = append(cols, c.headers), append(after, ":headers")
		}
		if c.attempt != "" {
			cols, after = append(cols, c.attempt), append(after, "1")
		}
		if c.retryAfter != "" {
			when := b.now
			switch due {
			case dueAfter:
				when = b.retryAt(b.typed(":delay"))
			case dueAt:
				when = b.atMicros(":at")
			}
			cols, after = append(cols, c.retryAfter), append(after, when)
		}
		values := make([]string, n)
		for i := range values {
			row := append(append(append([]string(nil), before...), fmt.Sprintf(":payload%d", i)), after...)
			values[i] = "(" + strings.Join(row, ", ") + ")"
		}
		text := fmt.Sprintf(`INSERT INTO %s (%s) VALUES %s`, c.table, strings.Join(cols, ", "), strings.Join(values, ", "))
		if b.returning {
			text += " RETURNING " + c.id
		}
		return compile(text, b.style)
	}
}

// sqliteAt is the SQLite time of :arg microseconds since the epoch, in sqliteFormat.
func sqliteAt(arg string) string {
	return fmt.Sprintf("strftime(%s, %s / 1000000.0, 'unixepoch')", sqliteFormat, arg)
}

// pgAt is the timestamptz of :arg microseconds since the epoch: whole seconds, then the
// microseconds left (an interval multiplied by a number is computed in float8, which
// missed 9999-12-31 23:59:59.999 by 8 µs when multiplied by all the microseconds).
func pgAt(arg string) string {
	return fmt.Sprintf("(timestamptz 'epoch' + (%[1]s::bigint / 1000000) * interval '1 second' + (%[1]s::bigint %% 1000000) * interval '1 microsecond')", arg)
}

// myAt is the DATETIME(6) of :arg microseconds since the epoch in the session's time
// zone, as NOW(6) is: now plus the microseconds from now to :arg, the arithmetic of
// After's now + d. (FROM_UNIXTIME stops at 2038-01-19 on MariaDB 10.11, and returns NULL
// before 1970: At(2040) was refused with error 1292.)
func myAt(arg string) string {
	return fmt.Sprintf("(%s + INTERVAL (%s - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))) MICROSECOND)", myNow, arg)
}
