package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// filterFlags are the flags that select dead letters (admin.Filter).
type filterFlags struct {
	errSub  string
	headers []string
	ids     []string
	reason  string
	since   string
	source  string
	until   string
}

func (ff *filterFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&ff.errSub, "error", "", "only dead letters whose last error contains this substring")
	fs.StringArrayVar(&ff.headers, "header", nil, "only dead letters carrying header `k=v` (repeatable: all must match)")
	fs.StringArrayVar(&ff.ids, "id", nil, "only this entry `ID` (repeatable; each must exist)")
	fs.StringVar(&ff.reason, "reason", "", "only dead letters whose reason or last error matches this `regexp` (RE2, unanchored)")
	fs.StringVar(&ff.since, "since", "", "only dead letters written at or after `T` (RFC 3339, or a duration ago: 2h, 30m)")
	fs.StringVar(&ff.source, "source", "", "only dead letters read from this `KEY`")
	fs.StringVar(&ff.until, "until", "", "only dead letters written at or before `T` (RFC 3339, or a duration ago)")
}

// selector is what the filter flags select: an admin.Filter, and the --reason regexp,
// which the command matches itself (see resolve).
type selector struct {
	filter admin.Filter
	reason *regexp.Regexp
}

// selector returns what the flags select, or an error naming the flag that does not
// parse. Durations are counted back from now (this host's clock).
func (ff *filterFlags) selector(now time.Time) (selector, error) {
	f, err := ff.filter(now)
	if err != nil {
		return selector{}, err
	}
	sel := selector{filter: f}
	if ff.reason != "" {
		if sel.reason, err = regexp.Compile(ff.reason); err != nil {
			return selector{}, fmt.Errorf("--reason %q does not compile: %w", ff.reason, err)
		}
	}
	return sel, nil
}

// selected parses the filter flags, connects, and resolves them on key: the prelude of
// every dead-letter command.
func (a *app) selected(ctx context.Context, key string, ff *filterFlags) (f admin.Filter, none bool, err error) {
	return a.selectedIn(ctx, a.streams(), key, ff)
}

// selectedIn is selected for the dead letters of st.
func (a *app) selectedIn(ctx context.Context, st store, key string, ff *filterFlags) (f admin.Filter, none bool, err error) {
	sel, err := ff.selector(time.Now())
	if err != nil {
		return admin.Filter{}, false, err
	}
	if err := a.connect(ctx); err != nil {
		return admin.Filter{}, false, err
	}
	return a.resolve(ctx, st, key, sel)
}

// resolve returns the admin.Filter that selects the dead letters of key sel selects;
// none reports that it selects none (an empty Filter.IDs would select all).
//
// --reason matches the dead letter's reason (settle-dead-reason: "max attempts reached
// (5 of 5)") or its last error (settle-dead-error), where admin.Filter.Reason matches the
// reason only: the reason settle writes says how a message died, the error says why,
// and an operator's "reason unavailable" means either. So with --reason the command
// reads the selection (admin.DeadLetters), matches the regexp itself, and hands the ids
// that match to admin as Filter.IDs.
func (a *app) resolve(ctx context.Context, st store, key string, sel selector) (f admin.Filter, none bool, err error) {
	if sel.reason == nil {
		return sel.filter, false, nil
	}
	dls, err := st.entries(ctx, key, sel.filter, 0)
	if err != nil {
		return admin.Filter{}, false, err
	}
	var ids []string
	for _, d := range dls {
		if sel.reason.MatchString(d.Reason) || sel.reason.MatchString(d.Error) {
			ids = append(ids, d.ID)
		}
	}
	f = sel.filter
	f.IDs = ids
	return f, len(ids) == 0, nil
}

// filter returns the admin.Filter of the flags but --reason.
func (ff *filterFlags) filter(now time.Time) (admin.Filter, error) {
	f := admin.Filter{Error: ff.errSub, IDs: ff.ids, Source: ff.source}
	var err error
	if f.Since, err = parseWhen("--since", ff.since, now); err != nil {
		return admin.Filter{}, err
	}
	if f.Until, err = parseWhen("--until", ff.until, now); err != nil {
		return admin.Filter{}, err
	}
	for _, h := range ff.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return admin.Filter{}, fmt.Errorf("--header %q: want k=v", h)
		}
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		f.Headers[k] = v
	}
	return f, nil
}

// parseWhen reads a time given as RFC 3339 or as a duration before now ("" is the zero
// time).
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%s %q: not an RFC 3339 time (2006-01-02T15:04:05Z) nor a duration ago (2h, 30m)", flag, s)
	}
	return now.Add(-d), nil
}
