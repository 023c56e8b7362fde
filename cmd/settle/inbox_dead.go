package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
)

// rowFilterFlags are the flags that select dead rows (inbox.Filter).
type rowFilterFlags struct {
	errSub string
	fromID int64
	ids    []string
	since  string
	toID   int64
	until  string
}

func (ff *rowFilterFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&ff.errSub, "error", "", "only rows whose last error contains this substring (needs --last-error)")
	fs.StringArrayVar(&ff.ids, "id", nil, "only this row `ID` (repeatable; each must be in the dead letter)")
	fs.Int64Var(&ff.fromID, "from-id", 0, "only rows whose integer id is at least `N`")
	fs.Int64Var(&ff.toID, "to-id", 0, "only rows whose integer id is at most `N`")
	fs.StringVar(&ff.since, "since", "", "only rows dead-lettered at or after `T` (RFC 3339, or a duration ago: 2h; needs --dead-at)")
	fs.StringVar(&ff.until, "until", "", "only rows dead-lettered at or before `T` (RFC 3339, or a duration ago; needs --dead-at)")
}

// filter returns the inbox.Filter of the flags, durations counted back from now.
func (ff *rowFilterFlags) filter(now time.Time) (inbox.Filter, error) {
	f := inbox.Filter{Error: ff.errSub, FromID: ff.fromID, IDs: ff.ids, ToID: ff.toID}
	var err error
	if f.Since, err = parseWhen("--since", ff.since, now); err != nil {
		return inbox.Filter{}, err
	}
	if f.Until, err = parseWhen("--until", ff.until, now); err != nil {
		return inbox.Filter{}, err
	}
	return f, nil
}

// deadSummaryJSON is what inbox dead ls --json prints: the count of the dead rows
// selected, oldest and newest, grouped by normalised last error.
type deadSummaryJSON struct {
	ByError      []groupJSON `json:"by_error"`
	Count        int         `json:"count"`
	Dead         string      `json:"dead"`
	Newest       string      `json:"newest,omitempty"`
	NewestDeadAt *time.Time  `json:"newest_dead_at,omitempty"`
	Oldest       string      `json:"oldest,omitempty"`
	OldestDeadAt *time.Time  `json:"oldest_dead_at,omitempty"`
	Table        string      `json:"table"`
}

// rowJSON is one inbox.Row as inbox dead ls --rows --json prints it (the payload as
// inbox dead show shows it).
type rowJSON struct {
	Attempt     int64      `json:"attempt"`
	DeadAt      *time.Time `json:"dead_at,omitempty"`
	Group       string     `json:"group,omitempty"`
	ID          string     `json:"id"`
	LastError   string     `json:"last_error"`
	LockedUntil *time.Time `json:"locked_until,omitempty"`
	PayloadSize int        `json:"payload_size"`
	RetryAfter  *time.Time `json:"retry_after,omitempty"`
}

func rowJSONOf(r inbox.Row) rowJSON {
	return rowJSON{Attempt: r.Attempt, DeadAt: timeOrNil(r.DeadAt), Group: r.Group, ID: r.ID, LastError: r.LastError,
		LockedUntil: timeOrNil(r.LockedUntil), PayloadSize: len(r.Payload), RetryAfter: timeOrNil(r.RetryAfter)}
}

func (ic *inboxCLI) deadLsCommand() *cobra.Command {
	var ff rowFilterFlags
	var rows bool
	var limit int
	c := &cobra.Command{
		Use:   "ls DEAD",
		Short: "Count the dead rows of DEAD, grouped by normalised last error",
		Long: `Count the rows of the dead letter DEAD (a dead-letter group of the table, or a
dead-letter table) that the filters select (all without one), grouped by normalised last
error (ids and numbers replaced, so "bad address 42" and "bad address 7" group
together; needs --last-error). With --rows, list the rows instead, in id order.`,
		Example: `  settle inbox --config settle.json dead ls emails.dead
  settle inbox --config settle.json dead ls emails.dead --rows --error unavailable --json`,
		Args: exactArgs("DEAD"),
		RunE: ic.withDead(&ff, func(ctx context.Context, ib *inbox.Inbox, dead string, f inbox.Filter) error {
			if rows {
				rs, err := ib.DeadRows(ctx, dead, f, limit)
				if err != nil {
					return err
				}
				return ic.printRows(rs)
			}
			rs, err := ib.DeadRows(ctx, dead, f, 0)
			if err != nil {
				return err
			}
			return ic.printDeadSummary(summarize(ib.Table().Name, dead, rs))
		}),
	}
	ff.add(c)
	c.Flags().BoolVar(&rows, "rows", false, "list the rows instead of the summary")
	c.Flags().IntVar(&limit, "limit", 0, "with --rows, list at most `N` (0: all)")
	return c
}

// summarize counts rs (in id order) by normalised last error.
func summarize(table, dead string, rs []inbox.Row) deadSummaryJSON {
	s := deadSummaryJSON{ByError: []groupJSON{}, Count: len(rs), Dead: dead, Table: table}
	if len(rs) == 0 {
		return s
	}
	s.Oldest, s.Newest = rs[0].ID, rs[len(rs)-1].ID
	var oldest, newest time.Time
	byErr := map[string]*groupJSON{}
	for _, r := range rs {
		if !r.DeadAt.IsZero() {
			if oldest.IsZero() || r.DeadAt.Before(oldest) {
				oldest = r.DeadAt
			}
			if r.DeadAt.After(newest) {
				newest = r.DeadAt
			}
		}
		v := admin.NormalizeError(r.LastError)
		g, ok := byErr[v]
		if !ok {
			g = &groupJSON{Value: v}
			byErr[v] = g
		}
		g.Count++
		g.Example, g.Newest = r.LastError, r.ID
	}
	s.OldestDeadAt, s.NewestDeadAt = timeOrNil(oldest), timeOrNil(newest)
	for _, g := range byErr {
		s.ByError = append(s.ByError, *g)
	}
	sort.Slice(s.ByError, func(i, j int) bool {
		if s.ByError[i].Count != s.ByError[j].Count {
			return s.ByError[i].Count > s.ByError[j].Count
		}
		return s.ByError[i].Value < s.ByError[j].Value
	})
	return s
}

func (ic *inboxCLI) printDeadSummary(s deadSummaryJSON) error {
	a := ic.a
	if a.json {
		return a.printJSON(s)
	}
	fmt.Fprintf(a.stdout, "%s of %s: %d dead rows\n", s.Dead, s.Table, s.Count)
	if s.Count == 0 {
		return nil
	}
	at := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return "  dead at " + ago(*t)
	}
	fmt.Fprintf(a.stdout, "  oldest %s%s\n  newest %s%s\n\n", s.Oldest, at(s.OldestDeadAt), s.Newest, at(s.NewestDeadAt))
	w := a.table()
	fmt.Fprintln(w, "COUNT\tLAST ERROR (normalised)\tNEWEST")
	for _, g := range s.ByError {
		fmt.Fprintf(w, "%d\t%s\t%s\n", g.Count, orDash(g.Value), g.Newest)
	}
	return w.Flush()
}

func (ic *inboxCLI) printRows(rs []inbox.Row) error {
	a := ic.a
	if a.json {
		for _, r := range rs {
			if err := a.printJSON(rowJSONOf(r)); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "ID\tATTEMPT\tDEAD AT\tLAST ERROR")
	for _, r := range rs {
		deadAt := "-"
		if !r.DeadAt.IsZero() {
			deadAt = r.DeadAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", r.ID, r.Attempt, deadAt, orDash(firstLine(r.LastError)))
	}
	return w.Flush()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// peekedRowJSON is inbox.PeekedRow as inbox dead show --json prints it: Payload is the
// JSON itself when Format is "json", else a string.
type peekedRowJSON struct {
	rowJSON
	Dead        string `json:"dead"`
	DecodeError string `json:"decode_error,omitempty"`
	Format      string `json:"format"`
	Payload     any    `json:"payload"`
	Table       string `json:"table"`
}

func (ic *inboxCLI) deadShowCommand() *cobra.Command {
	var codec string
	c := &cobra.Command{
		Use:   "show DEAD ID",
		Short: "Show one dead row with its payload decoded",
		Long: `Show the row ID of the dead letter DEAD with its columns and its payload decoded by
--codec: msgpack and json are shown as JSON, raw as text (or hex when it is not
printable). A payload that does not decode is shown in hex, with why.`,
		Args: exactArgs("DEAD", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cd, ok := codecs[codec]
			if !ok {
				return usagef("--codec %q: want msgpack, json or raw", codec)
			}
			return ic.withInbox(func(ctx context.Context, ib *inbox.Inbox, args []string) error {
				p, err := ib.PeekDead(ctx, args[0], args[1], cd)
				if err != nil {
					return err
				}
				return ic.printPeekedRow(ib.Table().Name, args[0], p)
			})(cmd, args)
		},
	}
	c.Flags().StringVar(&codec, "codec", "msgpack", "payload codec: msgpack, json or raw")
	return c
}

func (ic *inboxCLI) printPeekedRow(table, dead string, p *inbox.PeekedRow) error {
	a := ic.a
	if a.json {
		pj := peekedRowJSON{rowJSON: rowJSONOf(p.Row), Dead: dead, DecodeError: p.DecodeError, Format: p.Format, Payload: p.Shown, Table: table}
		if p.Format == "json" {
			pj.Payload = json.RawMessage(p.Shown)
		}
		return a.printJSON(pj)
	}
	deadAt := "-"
	if !p.DeadAt.IsZero() {
		deadAt = ago(p.DeadAt)
	}
	fmt.Fprintf(a.stdout, "table       %s\ndead letter %s\nid          %s\nattempt     %d\ndead at     %s\nlast error  %s\n",
		table, dead, p.ID, p.Attempt, deadAt, orDash(p.LastError))
	fmt.Fprintf(a.stdout, "payload     (%s)\n", p.Format)
	if p.DecodeError != "" {
		fmt.Fprintf(a.stdout, "  did not decode: %s\n", p.DecodeError)
	}
	fmt.Fprintf(a.stdout, "  %s\n", p.Shown)
	return nil
}

// rowReplayJSON is inbox.ReplayResult as inbox dead replay --json prints it.
type rowReplayJSON struct {
	Dead     string   `json:"dead"`
	DryRun   bool     `json:"dry_run"`
	Gone     []string `json:"gone"`
	Replayed []string `json:"replayed"`
	Table    string   `json:"table"`
	To       string   `json:"to"`
}

func (ic *inboxCLI) deadReplayCommand() *cobra.Command {
	var ff rowFilterFlags
	var af actionFlags
	var limit int
	var rate float64
	var to string
	c := &cobra.Command{
		Use:   "replay DEAD",
		Short: "Move dead rows of DEAD back to a group of the inbox, attempts reset",
		Long: `Move the rows of the dead letter DEAD that the filters select (all without one) back
to the inbox, in id order: due now, attempt 1, lease, last error and dead-at cleared.
From a dead-letter group they go to the group --to names (required: a dead row keeps no
group of its own); from a dead-letter table back into the table (no --to). Each batch
is one statement (one row a statement with --rate), so a replay run again, or after a
crash, moves nothing twice. The selection is checked first: a column the table lacks, a
filter on a column not named, an id not in the dead letter is refused and nothing moves.`,
		Example: `  settle inbox --config settle.json dead replay emails.dead --to emails --error unavailable --rate 50
  settle inbox --config settle.json dead replay emails.dead --to emails --id 42 --yes`,
		Args: exactArgs("DEAD"),
		RunE: ic.withDead(&ff, func(ctx context.Context, ib *inbox.Inbox, dead string, f inbox.Filter) error {
			opts := []inbox.ActionOption{inbox.Limit(limit), inbox.Rate(rate)}
			if to != "" {
				opts = append(opts, inbox.To(to))
			}
			return twoPass(ic.a, af,
				func() (*inbox.ReplayResult, int, string, error) {
					dry, err := ib.Replay(ctx, dead, f, append(opts, inbox.DryRun())...)
					if err != nil {
						return nil, 0, "", err
					}
					where := fmt.Sprintf("group %q", dry.To)
					if ib.Table().Group == "" {
						where = "table " + ib.Table().Name
					}
					return dry, len(dry.Replayed), fmt.Sprintf("replay %d dead rows of %q to %s", len(dry.Replayed), dead, where), nil
				},
				func(dry *inbox.ReplayResult) (*inbox.ReplayResult, error) {
					return ib.Replay(ctx, dead, shownRows(f, dry.Replayed), opts...)
				},
				func(r *inbox.ReplayResult) error { return ic.printRowReplay(ib.Table().Name, dead, r) })
		}),
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "replay at most `N`, in id order (0: all)")
	c.Flags().Float64Var(&rate, "rate", 0, "replay at most `N` rows a second (0: as fast as the database answers)")
	c.Flags().StringVar(&to, "to", "", "the `GROUP` to move the rows to (required for a dead-letter group)")
	return c
}

// printRowReplay prints r (nothing for nil: a replay refused before it began).
func (ic *inboxCLI) printRowReplay(table, dead string, r *inbox.ReplayResult) error {
	if r == nil {
		return nil
	}
	a := ic.a
	if a.json {
		out := rowReplayJSON{Dead: dead, DryRun: r.DryRun, Gone: r.Gone, Replayed: r.Replayed, Table: table, To: r.To}
		if out.Gone == nil {
			out.Gone = []string{}
		}
		if out.Replayed == nil {
			out.Replayed = []string{}
		}
		return a.printJSON(out)
	}
	verb := "replayed"
	if r.DryRun {
		verb = "would replay"
	}
	fmt.Fprintf(a.stdout, "%s %d dead rows of %s", verb, len(r.Replayed), dead)
	if r.To != "" {
		fmt.Fprintf(a.stdout, " to %s", r.To)
	}
	if len(r.Replayed) > 0 {
		fmt.Fprintf(a.stdout, ": %s", strings.Join(r.Replayed, ", "))
	}
	fmt.Fprintln(a.stdout, goneNote(r.Gone))
	return nil
}

// rowPurgeJSON is inbox.PurgeResult as inbox dead purge --json prints it.
type rowPurgeJSON struct {
	Dead     string   `json:"dead"`
	Deleted  int64    `json:"deleted"`
	DryRun   bool     `json:"dry_run"`
	Selected []string `json:"selected"`
	Table    string   `json:"table"`
}

func (ic *inboxCLI) deadPurgeCommand() *cobra.Command {
	var ff rowFilterFlags
	var af actionFlags
	var limit int
	c := &cobra.Command{
		Use:   "purge DEAD",
		Short: "Delete dead rows of DEAD",
		Long: `Delete the rows of the dead letter DEAD that the filters select (all without one).
The selection is checked first, as for replay; a purge run again deletes nothing more.`,
		Args: exactArgs("DEAD"),
		RunE: ic.withDead(&ff, func(ctx context.Context, ib *inbox.Inbox, dead string, f inbox.Filter) error {
			return twoPass(ic.a, af,
				func() (*inbox.PurgeResult, int, string, error) {
					dry, err := ib.Purge(ctx, dead, f, inbox.Limit(limit), inbox.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.IDs), fmt.Sprintf("delete %d dead rows of %q", len(dry.IDs), dead), nil
				},
				func(dry *inbox.PurgeResult) (*inbox.PurgeResult, error) {
					return ib.Purge(ctx, dead, shownRows(f, dry.IDs), inbox.Limit(limit))
				},
				func(r *inbox.PurgeResult) error { return ic.printRowPurge(ib.Table().Name, dead, r) })
		}),
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "delete at most `N`, in id order (0: all)")
	return c
}

// printRowPurge prints r (nothing for nil: a purge refused before it began).
func (ic *inboxCLI) printRowPurge(table, dead string, r *inbox.PurgeResult) error {
	if r == nil {
		return nil
	}
	a := ic.a
	if a.json {
		out := rowPurgeJSON{Dead: dead, Deleted: r.Deleted, DryRun: r.DryRun, Selected: r.IDs, Table: table}
		if out.Selected == nil {
			out.Selected = []string{}
		}
		return a.printJSON(out)
	}
	if r.DryRun {
		fmt.Fprintf(a.stdout, "would delete %d dead rows of %s", len(r.IDs), dead)
		if len(r.IDs) > 0 {
			fmt.Fprintf(a.stdout, ": %s", strings.Join(r.IDs, ", "))
		}
		fmt.Fprintln(a.stdout)
		return nil
	}
	fmt.Fprintf(a.stdout, "deleted %d of the %d dead rows of %s selected\n", r.Deleted, len(r.IDs), dead)
	return nil
}

// shownRows is f bounded to the rows a dry run showed (ids, in id order): the action
// touches those and none that arrived since. Rows whose ids are not integers are
// named one by one.
func shownRows(f inbox.Filter, shown []string) inbox.Filter {
	if len(f.IDs) > 0 || len(shown) == 0 {
		return f
	}
	if last, err := strconv.ParseInt(shown[len(shown)-1], 10, 64); err == nil && (f.ToID == 0 || last < f.ToID) {
		f.ToID = last
		return f
	}
	f.IDs = shown
	return f
}
