package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

func (a *app) dlqCommand() *cobra.Command {
	return group("dlq", "Dead letters: list, show, replay, purge, export, import",
		a.dlqLsCommand(a.streams()), a.dlqShowCommand(), a.dlqReplayCommand(a.streams()), a.dlqPurgeCommand(a.streams()),
		a.dlqExportCommand(), a.dlqImportCommand())
}

// summaryJSON is admin.DeadLetterSummary as --json prints it.
type summaryJSON struct {
	ByError  []groupJSON `json:"by_error"`
	ByReason []groupJSON `json:"by_reason"`
	BySource []groupJSON `json:"by_source"`
	Count    int         `json:"count"`
	Key      string      `json:"key"`
	Newest   string      `json:"newest,omitempty"`
	NewestAt *time.Time  `json:"newest_at,omitempty"`
	Oldest   string      `json:"oldest,omitempty"`
	OldestAt *time.Time  `json:"oldest_at,omitempty"`
	Sampled  int         `json:"sampled,omitempty"`
	Total    int64       `json:"total"`
}

type groupJSON struct {
	Count   int    `json:"count"`
	Example string `json:"example"`
	Newest  string `json:"newest"`
	Value   string `json:"value"`
}

func groupsJSON(gs []admin.Group) []groupJSON {
	out := make([]groupJSON, 0, len(gs))
	for _, g := range gs {
		out = append(out, groupJSON{Count: g.Count, Example: g.Example, Newest: g.Newest, Value: g.Value})
	}
	return out
}

// deadLetterJSON is one admin.DeadLetter as dlq ls --entries --json prints it.
type deadLetterJSON struct {
	Error      string            `json:"error"`
	Headers    map[string]string `json:"headers"`
	ID         string            `json:"id"`
	OriginalID string            `json:"original_id"`
	Reason     string            `json:"reason"`
	Source     string            `json:"source"`
	Time       time.Time         `json:"time"`
}

func (a *app) dlqLsCommand(st store) *cobra.Command {
	var ff filterFlags
	var entries bool
	var limit, sample int
	var after string
	c := &cobra.Command{
		Use:   "ls KEY",
		Short: "Count the dead letters of KEY, grouped by reason, normalised error and source",
		Long: `Count the dead letters of the dead-letter ` + st.noun + ` KEY (all, or those the filters
select), grouped by reason, by normalised error (ids and numbers replaced, so that
"card 4242 declined" and "card 1881 declined" group together) and by source.
With --entries, list the entries instead, oldest first, a page at a time (--limit, and
--after the last id shown; a page of a filter that matches few reads at most 10,000 entries
and says where to read on).` + st.note,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := a.selectedIn(cmd.Context(), &ff)
			if err != nil {
				return err
			}
			if entries {
				f.After = after
				dls, err := st.open(args[0]).Page(cmd.Context(), f, limit)
				var bound *admin.ScanBoundError
				switch {
				case errors.As(err, &bound):
					defer fmt.Fprintf(a.stderr, "read %d entries without filling the page: more with --after %s\n", bound.Read, bound.Next)
				case err != nil:
					return err
				}
				if err := a.printDeadLetters(dls); err != nil {
					return err
				}
				if limit > 0 && len(dls) == limit {
					fmt.Fprintf(a.stderr, "more: --after %s\n", dls[len(dls)-1].ID)
				}
				return nil
			}
			s, err := st.open(args[0]).Summary(cmd.Context(), f, sample)
			if err != nil {
				return err
			}
			if s.Count > 0 && len(s.BySource) == 1 && s.BySource[0].Value == "" {
				return fmt.Errorf("%s holds no dead letters: none of its %d entries read carries %s (is it a source %s? its dead letters are in the mount's DeadLetter)", args[0], s.Count, settle.HeaderDeadSource, st.noun)
			}
			return a.printSummary(s)
		},
	}
	ff.add(c)
	c.Flags().BoolVar(&entries, "entries", false, "list the entries instead of the summary")
	c.Flags().IntVar(&sample, "sample", admin.DefaultSample, "count among the newest `N` dead letters only (0: read them all)")
	c.Flags().IntVar(&limit, "limit", 100, "with --entries, list at most `N` (0: all, reading the whole dead letter)")
	c.Flags().StringVar(&after, "after", "", "with --entries, the page after this `ID` (a list: index)")
	return c
}

func (a *app) printSummary(s *admin.DeadLetterSummary) error {
	if a.json {
		return a.printJSON(summaryJSONOf(s))
	}
	if s.Sampled > 0 {
		fmt.Fprintf(a.stdout, "%s: %d dead letters of the newest %d (%d in all; --sample 0 counts them all)\n", s.Key, s.Count, s.Sampled, s.Total)
	} else {
		fmt.Fprintf(a.stdout, "%s: %d dead letters\n", s.Key, s.Count)
	}
	if s.Count == 0 {
		return nil
	}
	fmt.Fprintf(a.stdout, "  oldest %s  %s\n  newest %s  %s\n\n", s.Oldest, ago(s.OldestAt), s.Newest, ago(s.NewestAt))
	w := a.table()
	for _, sec := range []struct {
		title string
		gs    []admin.Group
	}{{"REASON", s.ByReason}, {"ERROR (normalised)", s.ByError}, {"SOURCE", s.BySource}} {
		fmt.Fprintf(w, "COUNT\t%s\tNEWEST\n", sec.title)
		for _, g := range sec.gs {
			fmt.Fprintf(w, "%d\t%s\t%s\n", g.Count, orDash(g.Value), g.Newest)
		}
		fmt.Fprintln(w, "\t\t")
	}
	return w.Flush()
}

func (a *app) printDeadLetters(dls []admin.DeadLetter) error {
	if a.json {
		for _, d := range dls {
			if err := a.printJSON(deadLetterJSON{
				Error: d.Error, Headers: d.Headers, ID: d.ID, OriginalID: d.OriginalID,
				Reason: d.Reason, Source: d.Source, Time: d.Time,
			}); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "ID\tDEAD AT\tSOURCE\tREASON\tERROR")
	for _, d := range dls {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Time.Local().Format(time.RFC3339), orDash(d.Source), orDash(d.Reason), orDash(d.Error))
	}
	return w.Flush()
}

// peekJSON is admin.Peeked as dlq show --json prints it: Payload is the JSON itself when
// Format is "json", else a string.
type peekJSON struct {
	DecodeError string            `json:"decode_error,omitempty"`
	Format      string            `json:"format"`
	HasPayload  bool              `json:"has_payload"`
	Headers     map[string]string `json:"headers"`
	ID          string            `json:"id"`
	Key         string            `json:"key"`
	Payload     any               `json:"payload"`
	Time        time.Time         `json:"time"`
}

// codecs are the codecs --codec names.
var codecs = map[string]settle.Codec{"json": settle.JSON, "msgpack": settle.Msgpack, "raw": settle.Raw}

func (a *app) dlqShowCommand() *cobra.Command {
	var codec string
	c := &cobra.Command{
		Use:   "show KEY ID",
		Short: "Show one entry of KEY with its headers and its payload decoded",
		Long: `Show entry ID of the stream KEY (a dead-letter stream or any other) with its headers
and its payload decoded by --codec: msgpack and json are shown as JSON, raw as text (or
hex when it is not printable). A payload that does not decode is shown in hex, with why.`,
		Args: exactArgs("KEY", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cd, ok := codecs[codec]
			if !ok {
				return usagef("--codec %q: want msgpack, json or raw", codec)
			}
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			p, err := a.insp.Peek(cmd.Context(), args[0], args[1], cd)
			if err != nil {
				return err
			}
			return a.printPeek(p)
		},
	}
	c.Flags().StringVar(&codec, "codec", "msgpack", "payload codec: msgpack, json or raw")
	return c
}

func (a *app) printPeek(p *admin.Peeked) error {
	if a.json {
		pj := peekJSON{DecodeError: p.DecodeError, Format: p.Format, HasPayload: p.HasPayload, Headers: p.Headers,
			ID: p.ID, Key: p.Key, Payload: p.Shown, Time: p.Time}
		if p.Format == "json" {
			pj.Payload = json.RawMessage(p.Shown)
		}
		return a.printJSON(pj)
	}
	fmt.Fprintf(a.stdout, "key      %s\nid       %s\nadded at %s\n", p.Key, p.ID, ago(p.Time))
	names := make([]string, 0, len(p.Headers))
	for k := range p.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(a.stdout, "headers")
	w := a.table()
	for _, k := range names {
		fmt.Fprintf(w, "  %s\t%s\n", k, p.Headers[k])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if !p.HasPayload {
		fmt.Fprintln(a.stdout, "payload  (none: the entry has no payload field)")
		return nil
	}
	fmt.Fprintf(a.stdout, "payload  (%s)\n", p.Format)
	if p.DecodeError != "" {
		fmt.Fprintf(a.stdout, "  did not decode: %s\n", p.DecodeError)
	}
	shown := p.Shown
	if p.Format == "json" {
		var b bytes.Buffer
		if json.Indent(&b, []byte(p.Shown), "  ", "  ") == nil {
			shown = b.String()
		}
	}
	fmt.Fprintf(a.stdout, "  %s\n", shown)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
