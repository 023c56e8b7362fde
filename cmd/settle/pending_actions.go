package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// pendingEntryJSON is admin.PendingEntry as --json prints it.
type pendingEntryJSON struct {
	Consumer   string `json:"consumer"`
	DeadID     string `json:"dead_id,omitempty"`
	Deliveries int64  `json:"deliveries"`
	ID         string `json:"id"`
	IdleMs     int64  `json:"idle_ms"`
}

func pendingEntryJSONOf(p admin.PendingEntry, deadID string) pendingEntryJSON {
	return pendingEntryJSON{Consumer: p.Consumer, DeadID: deadID, Deliveries: p.Deliveries, ID: p.ID, IdleMs: ms(p.Idle)}
}

// pendingDeadJSON is admin.DeadLetterPendingResult as pending dead --json prints it.
type pendingDeadJSON struct {
	DeadLettered []pendingEntryJSON `json:"dead_lettered"`
	DryRun       bool               `json:"dry_run"`
	Gone         []string           `json:"gone"`
	Group        string             `json:"group"`
	Key          string             `json:"key"`
	To           string             `json:"to"`
}

// pendingReleaseJSON is admin.ReleaseResult as pending release --json prints it.
type pendingReleaseJSON struct {
	Already  []string           `json:"already"`
	DryRun   bool               `json:"dry_run"`
	Gone     []string           `json:"gone"`
	Group    string             `json:"group"`
	Key      string             `json:"key"`
	Released []pendingEntryJSON `json:"released"`
}

// keyGroupIDs requires KEY GROUP and one or more ids, or none with --consumer or --all.
func keyGroupIDs(cmd *cobra.Command, args []string) error {
	consumer, _ := cmd.Flags().GetString("consumer")
	all, _ := cmd.Flags().GetBool("all")
	switch {
	case len(args) < 2:
		return usagef("%s takes KEY GROUP ID... (or --consumer C, or --all), got %d argument(s)", cmd.CommandPath(), len(args))
	case consumer != "" && all:
		return usagef("%s: --consumer and --all select differently: give one", cmd.CommandPath())
	case (consumer != "" || all) && len(args) > 2:
		return usagef("%s: give the ids, or --consumer / --all, not both", cmd.CommandPath())
	case consumer == "" && !all && len(args) < 3:
		return usagef("%s takes KEY GROUP ID..., or --consumer C, or --all", cmd.CommandPath())
	}
	return nil
}

// pendingSel are the flags that select pending entries besides their ids.
type pendingSel struct {
	all      bool
	consumer string
}

func (ps *pendingSel) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&ps.consumer, "consumer", "", "every entry pending at this `CONSUMER` (instead of ids)")
	cmd.Flags().BoolVar(&ps.all, "all", false, "every pending entry of the group (instead of ids)")
}

// ids returns the ids args name, or those --consumer or --all select, read now (page
// by page): the set the confirmation names and the action acts on.
func (ps pendingSel) ids(cmd *cobra.Command, a *app, key, grp string, args []string) ([]string, error) {
	if !ps.all && ps.consumer == "" {
		return args, nil
	}
	ids, err := a.insp.PendingIDs(cmd.Context(), key, grp, ps.consumer)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("nothing is pending in %q group %q%s", key, grp, map[bool]string{true: " at consumer " + ps.consumer, false: ""}[ps.consumer != ""])
	}
	return ids, nil
}

func (a *app) pendingDeadCommand() *cobra.Command {
	var af actionFlags
	var ps pendingSel
	var to string
	c := &cobra.Command{
		Use:   "dead KEY GROUP ID... --to DLQ",
		Short: "Dead-letter pending entries of KEY's group GROUP now",
		Long: `Dead-letter the pending entries ID... of the stream KEY's consumer group GROUP now, to
the dead-letter stream --to: each is written as settle writes a dead letter (its
headers kept, the retry count set to the attempts spent, reason "` + admin.ReasonOperator + `")
and acknowledged, in one script, so the consumer holding it settles nothing more. An
entry not in the stream or not pending is refused, and nothing changes; an entry
settled meanwhile is reported gone.`,
		Example: `  settle pending dead '{refunds}' refunds 1700000000000-0 --to '{refunds}.dlq'
  settle pending dead '{refunds}' refunds --consumer worker-7 --to '{refunds}.dlq'`,
		Args: keyGroupIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usagef("%s needs --to DLQ: the dead-letter stream", cmd.CommandPath())
			}
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			key, grp := args[0], args[1]
			ids, err := ps.ids(cmd, a, key, grp, args[2:])
			if err != nil {
				return err
			}
			return twoPass(a, af,
				func() (*admin.DeadLetterPendingResult, int, string, error) {
					dry, err := a.insp.DeadLetterPending(cmd.Context(), key, grp, ids, to, admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.DeadLettered), fmt.Sprintf("dead-letter %d pending entries of %q group %q to %q", len(dry.DeadLettered), key, grp, to), nil
				},
				func(*admin.DeadLetterPendingResult) (*admin.DeadLetterPendingResult, error) {
					return a.insp.DeadLetterPending(cmd.Context(), key, grp, ids, to)
				},
				func(r *admin.DeadLetterPendingResult) error { return a.printPendingDead(key, grp, r) })
		},
	}
	af.add(c)
	ps.add(c)
	c.Flags().StringVar(&to, "to", "", "the dead-letter stream `DLQ` (made when missing)")
	return c
}

func (a *app) printPendingDead(key, grp string, r *admin.DeadLetterPendingResult) error {
	if r == nil {
		return nil
	}
	if a.json {
		out := pendingDeadJSON{DeadLettered: []pendingEntryJSON{}, DryRun: r.DryRun, Gone: nonNil(r.Gone), Group: grp, Key: key, To: r.To}
		for _, d := range r.DeadLettered {
			out.DeadLettered = append(out.DeadLettered, pendingEntryJSONOf(d.PendingEntry, d.DeadID))
		}
		return a.printJSON(out)
	}
	w := a.table()
	fmt.Fprintln(w, "ENTRY\tCONSUMER\tDELIVERIES\tDEAD LETTER")
	for _, d := range r.DeadLettered {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", d.ID, d.Consumer, d.Deliveries, orDash(d.DeadID))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	verb := "dead-lettered"
	if r.DryRun {
		verb = "would dead-letter"
	}
	fmt.Fprintf(a.stdout, "%s %d pending entries of %s group %s to %s%s\n", verb, len(r.DeadLettered), key, grp, r.To, goneNote(r.Gone))
	return nil
}

func (a *app) pendingReleaseCommand() *cobra.Command {
	var af actionFlags
	var ps pendingSel
	c := &cobra.Command{
		Use:   "release KEY GROUP ID...",
		Short: "Release pending entries of KEY's group GROUP to the group, no attempt spent",
		Long: `Release the pending entries ID... of the stream KEY's consumer group GROUP (a stuck
entry, the entries of a consumer that died): each stays pending with one delivery taken
off its count and an idle time past any reclaim's, so that the group's next reclaim
takes it at once, without an attempt spent. An entry released already and not
delivered since is left alone; an entry not in the stream or not pending is refused.`,
		Example: `  settle pending release '{refunds}' refunds 1700000000000-0 --yes
  settle pending release '{refunds}' refunds --consumer worker-7 --yes`,
		Args: keyGroupIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			key, grp := args[0], args[1]
			ids, err := ps.ids(cmd, a, key, grp, args[2:])
			if err != nil {
				return err
			}
			return twoPass(a, af,
				func() (*admin.ReleaseResult, int, string, error) {
					dry, err := a.insp.ReleasePending(cmd.Context(), key, grp, ids, admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.Released), fmt.Sprintf("release %d pending entries of %q group %q", len(dry.Released), key, grp), nil
				},
				func(*admin.ReleaseResult) (*admin.ReleaseResult, error) {
					return a.insp.ReleasePending(cmd.Context(), key, grp, ids)
				},
				func(r *admin.ReleaseResult) error { return a.printRelease(key, grp, r) })
		},
	}
	af.add(c)
	ps.add(c)
	return c
}

func (a *app) printRelease(key, grp string, r *admin.ReleaseResult) error {
	if r == nil {
		return nil
	}
	if a.json {
		out := pendingReleaseJSON{Already: nonNil(r.Already), DryRun: r.DryRun, Gone: nonNil(r.Gone), Group: grp, Key: key, Released: []pendingEntryJSON{}}
		for _, p := range r.Released {
			out.Released = append(out.Released, pendingEntryJSONOf(p, ""))
		}
		return a.printJSON(out)
	}
	w := a.table()
	fmt.Fprintln(w, "ENTRY\tCONSUMER\tDELIVERIES\tIDLE")
	for _, p := range r.Released {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", p.ID, p.Consumer, p.Deliveries, dur(p.Idle))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	verb := "released"
	if r.DryRun {
		verb = "would release"
	}
	fmt.Fprintf(a.stdout, "%s %d pending entries of %s group %s", verb, len(r.Released), key, grp)
	if len(r.Already) > 0 {
		fmt.Fprintf(a.stdout, "; %d released already (%s)", len(r.Already), strings.Join(r.Already, ", "))
	}
	fmt.Fprintln(a.stdout, goneNote(r.Gone))
	return nil
}

// goneNote says which of a selection were gone before their turn ("" for none).
func goneNote(gone []string) string {
	if len(gone) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d were gone before their turn (%s)", len(gone), strings.Join(gone, ", "))
}

// nonNil is s, or an empty slice for JSON's [] in place of null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
