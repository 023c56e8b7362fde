package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// actionFlags are the flags every destructive action takes.
type actionFlags struct {
	dryRun bool
	yes    bool
}

func (af *actionFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&af.dryRun, "dry-run", false, "report what would change, change nothing")
	cmd.Flags().BoolVarP(&af.yes, "yes", "y", false, "go ahead without asking (required without a terminal)")
}

// twoPass runs a destructive action: check runs it as a dry run (the whole selection
// checked, nothing changed) and says how many it selects and what doing it means; unless
// --dry-run or nothing is selected, confirmation is asked (or --yes given) and act does
// it to what the dry run showed (its admin.Selection: never more, also when more
// arrived meanwhile). show prints a result: the dry run's, or what act did (also when
// act stopped part-way, so the operator sees what changed).
func twoPass[R any](a *app, af actionFlags, check func() (R, int, string, error), act func(dry R) (R, error), show func(R) error) error {
	dry, n, what, err := check()
	if err != nil {
		return err
	}
	if af.dryRun || n == 0 {
		return show(dry)
	}
	if err := a.confirm(what, af.yes); err != nil {
		return err
	}
	res, err := act(dry)
	if perr := show(res); err == nil {
		err = perr
	}
	return err
}

// replayJSON is admin.ReplayResult as dlq replay --json prints it (one object).
type replayJSON struct {
	DryRun    bool           `json:"dry_run"`
	Gone      []string       `json:"gone"`
	Meanwhile int            `json:"gone_meanwhile"`
	Key       string         `json:"key"`
	Replayed  []replayedJSON `json:"replayed"`
}

type replayedJSON struct {
	ID    string `json:"id"`
	NewID string `json:"new_id,omitempty"`
	To    string `json:"to"`
}

func (a *app) dlqReplayCommand(st store) *cobra.Command {
	var ff filterFlags
	var af actionFlags
	var limit int
	var rate float64
	var to string
	c := &cobra.Command{
		Use:   "replay KEY",
		Short: "Move dead letters of KEY back to the " + st.noun + " they came from, attempts reset",
		Long: `Move the dead letters of the dead-letter ` + st.noun + ` KEY that the filters select (all
without a filter) back to the ` + st.noun + ` each came from, or to --to, oldest first. Each goes
back with settle's own headers removed (its attempts start again) and a
settle-replayed-from header; each moves in one script, so a replay run again moves
nothing twice. The whole selection is checked first: a missing key, an id not found, a
regexp that does not compile, a destination that is missing or in another cluster slot
is refused and nothing moves.` + st.note,
		Example: st.replayExample,
		Args:    exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			f, err := a.selectedIn(cmd.Context(), &ff)
			if err != nil {
				return err
			}
			ds := st.open(key)
			opts := []admin.ReplayOption{admin.Limit(limit), admin.Rate(rate)}
			if to != "" {
				opts = append(opts, admin.To(to))
			}
			return twoPass(a, af,
				func() (*admin.ReplayResult, int, string, error) {
					dry, err := ds.Replay(cmd.Context(), admin.Selection{Filter: f}, append(opts, admin.DryRun())...)
					if err != nil {
						return nil, 0, "", err
					}
					dry.DryRun = af.dryRun || len(dry.Replayed) > 0 // nothing selected: a real run that replayed none
					return dry, len(dry.Replayed), fmt.Sprintf("replay %d dead letters of %q to %s", len(dry.Replayed), key, destinations(dry)), nil
				},
				func(dry *admin.ReplayResult) (*admin.ReplayResult, error) {
					return ds.Replay(cmd.Context(), *dry.Selection, opts...)
				},
				func(r *admin.ReplayResult) error { return a.printReplay(key, r) })
		},
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "replay at most `N`, oldest first (0: all)")
	c.Flags().Float64Var(&rate, "rate", 0, "replay at most `N` a second (0: as fast as Redis answers)")
	c.Flags().StringVar(&to, "to", "", "replay to this "+st.noun+" `KEY` instead of each dead letter's source")
	return c
}

// destinations names the streams a replay writes to.
func destinations(r *admin.ReplayResult) string {
	seen := map[string]bool{}
	var names []string
	for _, m := range r.Replayed {
		if !seen[m.To] {
			seen[m.To] = true
			names = append(names, fmt.Sprintf("%q", m.To))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// printReplay prints r (nothing for nil: a replay refused before it began).
func (a *app) printReplay(key string, r *admin.ReplayResult) error {
	if r == nil {
		return nil
	}
	if a.json {
		out := replayJSON{DryRun: r.DryRun, Gone: r.Gone, Meanwhile: r.Meanwhile, Key: key, Replayed: []replayedJSON{}}
		if out.Gone == nil {
			out.Gone = []string{}
		}
		for _, m := range r.Replayed {
			out.Replayed = append(out.Replayed, replayedJSON{ID: m.ID, NewID: m.NewID, To: m.To})
		}
		return a.printJSON(out)
	}
	verb := "replayed"
	if r.DryRun {
		verb = "would replay"
	}
	if len(r.Replayed) > 0 {
		w := a.table()
		fmt.Fprintln(w, "DEAD LETTER\tTO\tNEW ID")
		for _, m := range r.Replayed {
			fmt.Fprintf(w, "%s\t%s\t%s\n", m.ID, m.To, orDash(m.NewID))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stdout, "%s %d dead letters of %s", verb, len(r.Replayed), key)
	fmt.Fprintln(a.stdout, goneNote(r.Gone)+meanwhileNote(r.Meanwhile))
	return nil
}

// purgeJSON is admin.PurgeResult as dlq purge --json prints it (one object).
type purgeJSON struct {
	Deleted   int64    `json:"deleted"`
	Meanwhile int      `json:"gone_meanwhile"`
	DryRun    bool     `json:"dry_run"`
	Key       string   `json:"key"`
	Selected  []string `json:"selected"`
}

func (a *app) dlqPurgeCommand(st store) *cobra.Command {
	var ff filterFlags
	var af actionFlags
	var limit int
	c := &cobra.Command{
		Use:   "purge KEY",
		Short: "Delete dead letters of KEY",
		Long: `Delete the dead letters of the dead-letter ` + st.noun + ` KEY that the filters select (all
without a filter). The selection is checked first, as for replay; a purge run again
deletes nothing more.` + st.note,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			f, err := a.selectedIn(cmd.Context(), &ff)
			if err != nil {
				return err
			}
			ds := st.open(key)
			return twoPass(a, af,
				func() (*admin.PurgeResult, int, string, error) {
					dry, err := ds.Purge(cmd.Context(), admin.Selection{Filter: f}, admin.Limit(limit), admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					dry.DryRun = af.dryRun || len(dry.IDs) > 0 // nothing selected: a real run that deleted none
					return dry, len(dry.IDs), fmt.Sprintf("delete %d dead letters of %q", len(dry.IDs), key), nil
				},
				func(dry *admin.PurgeResult) (*admin.PurgeResult, error) {
					return ds.Purge(cmd.Context(), *dry.Selection, admin.Limit(limit))
				},
				func(r *admin.PurgeResult) error { return a.printPurge(key, r) })
		},
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "delete at most `N`, oldest first (0: all)")
	return c
}

// printPurge prints r (nothing for nil: a purge refused before it began).
func (a *app) printPurge(key string, r *admin.PurgeResult) error {
	if r == nil {
		return nil
	}
	if a.json {
		out := purgeJSON{Deleted: r.Deleted, Meanwhile: r.Meanwhile, DryRun: r.DryRun, Key: key, Selected: r.IDs}
		if out.Selected == nil {
			out.Selected = []string{}
		}
		return a.printJSON(out)
	}
	if r.DryRun {
		fmt.Fprintf(a.stdout, "would delete %d dead letters of %s\n", len(r.IDs), key)
		for _, id := range r.IDs {
			fmt.Fprintf(a.stdout, "  %s\n", id)
		}
		return nil
	}
	fmt.Fprintf(a.stdout, "deleted %d of the %d dead letters of %s selected%s\n", r.Deleted, len(r.IDs), key, meanwhileNote(r.Meanwhile))
	return nil
}

// meanwhileNote says how many of those confirmed were gone when the action came.
func meanwhileNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of those confirmed were gone meanwhile)", n)
}
