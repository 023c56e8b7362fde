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

// selected parses the filter flags and connects: the prelude of every dead-letter
// command. --reason is admin.Filter.Reason, which matches the reason or the last error
// (one filter language for the command line, the console and admin).
func (a *app) selectedIn(ctx context.Context, ff *filterFlags) (admin.Filter, error) {
	f, err := ff.filter(time.Now())
	if err != nil {
		return admin.Filter{}, err
	}
	if ff.reason != "" {
		if _, err := regexp.Compile(ff.reason); err != nil {
			return admin.Filter{}, fmt.Errorf("--reason %q does not compile: %w", ff.reason, err)
		}
	}
	if err := a.connect(ctx); err != nil {
		return admin.Filter{}, err
	}
	return f, nil
}

// filter returns the admin.Filter of the flags, or an error naming the flag that does
// not parse. Durations are counted back from now (this host's clock).
func (ff *filterFlags) filter(now time.Time) (admin.Filter, error) {
	f := admin.Filter{Error: ff.errSub, IDs: ff.ids, Reason: ff.reason, Source: ff.source}
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
