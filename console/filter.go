package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// filterForm is the filter box of a dead-letter list, as the request gives it: the
// same fields filter a page, and select what "replay all matching" moves.
type filterForm struct {
	// After is the cursor: the id of the last entry of the page before.
	After string
	// Error is a substring of the last error.
	Error string
	// Limit is the page size asked for (0: the console's).
	Limit int
	// Reason is a regular expression the reason must match.
	Reason string
	// Since and Until bound when the entry was dead-lettered (UTC, as
	// 2006-01-02T15:04[:05]).
	Since, Until string
}

// timeLayouts are the forms Since and Until parse, as datetime-local inputs send them.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02T15:04:05.000", time.RFC3339Nano}

// readFilter reads the filter fields of r (query or form).
func readFilter(r *http.Request) filterForm {
	f := filterForm{
		After: r.FormValue("after"), Error: r.FormValue("error"), Reason: r.FormValue("reason"),
		Since: r.FormValue("since"), Until: r.FormValue("until"),
	}
	f.Limit, _ = strconv.Atoi(r.FormValue("limit"))
	return f
}

// limit is the page size f asks for, bounded by MaxPageSize (def when it asks none).
func (f filterForm) limit(def int) int {
	if f.Limit <= 0 {
		return def
	}
	return min(f.Limit, MaxPageSize)
}

// times parses Since and Until, naming the one that does not parse.
func (f filterForm) times() (since, until time.Time, err error) {
	if since, err = parseTime("since", f.Since); err != nil {
		return
	}
	until, err = parseTime("until", f.Until)
	return
}

func parseTime(field, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time (UTC, as 2006-01-02T15:04:05)", field, v)
}

// query is f as a query string, with the cursor after (for the next page's link).
func (f filterForm) query(after string) string {
	v := url.Values{}
	for k, s := range map[string]string{"reason": f.Reason, "error": f.Error, "since": f.Since, "until": f.Until, "after": after} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if f.Limit > 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v.Encode()
}

// empty reports whether f selects everything.
func (f filterForm) empty() bool {
	return f.Reason == "" && f.Error == "" && f.Since == "" && f.Until == ""
}
