package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// pruneJSON is admin.PruneResult as consumers prune --json prints it.
type pruneJSON struct {
	DryRun bool     `json:"dry_run"`
	Group  string   `json:"group"`
	Key    string   `json:"key"`
	Pruned []string `json:"pruned"`
}

func (a *app) consumersCommand() *cobra.Command {
	var reclaim time.Duration
	ls := &cobra.Command{
		Use:   "ls KEY GROUP",
		Short: "List the consumers of KEY's group GROUP: pending, idle, dead",
		Long: `List the consumers of the stream KEY's consumer group GROUP, each with its pending
count and idle time; one holding pending entries and idle past --reclaim-idle is dead.
With --json, one object per consumer.`,
		Args: exactArgs("KEY", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			s, err := a.insp.Stream(cmd.Context(), args[0], args[1], admin.ReclaimIdle(reclaim))
			if err != nil {
				return err
			}
			if a.json {
				for _, c := range streamJSONOf(s).Consumers {
					if err := a.printJSON(c); err != nil {
						return err
					}
				}
				return nil
			}
			return a.printConsumers(s.Consumers)
		},
	}
	ls.Flags().DurationVar(&reclaim, "reclaim-idle", settle.DefaultReclaim, "idle past which a consumer holding entries counts as dead")

	var af actionFlags
	prune := &cobra.Command{
		Use:   "prune KEY GROUP",
		Short: "Remove the consumers of KEY's group GROUP that hold no pending entry",
		Long: `Remove from the stream KEY's consumer group GROUP the consumers that hold no pending
entry (names left by processes that stopped), each checked and removed in one script,
so no pending entry is lost. A consumer that reads again is made again.`,
		Args: exactArgs("KEY", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			key, grp := args[0], args[1]
			return twoPass(a, af,
				func() (*admin.PruneResult, int, string, error) {
					dry, err := a.insp.PruneConsumers(cmd.Context(), key, grp, admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.Pruned), fmt.Sprintf("remove %d consumers of %q group %q", len(dry.Pruned), key, grp), nil
				},
				func(*admin.PruneResult) (*admin.PruneResult, error) {
					return a.insp.PruneConsumers(cmd.Context(), key, grp)
				},
				func(r *admin.PruneResult) error {
					if r == nil {
						return nil
					}
					if a.json {
						return a.printJSON(pruneJSON{DryRun: r.DryRun, Group: grp, Key: key, Pruned: nonNil(r.Pruned)})
					}
					verb := "removed"
					if r.DryRun {
						verb = "would remove"
					}
					fmt.Fprintf(a.stdout, "%s %d consumers of %s group %s\n", verb, len(r.Pruned), key, grp)
					for _, n := range r.Pruned {
						fmt.Fprintf(a.stdout, "  %s\n", n)
					}
					return nil
				})
		},
	}
	af.add(prune)
	return group("consumers", "A stream group's consumers", ls, prune)
}

// printConsumers prints a group's consumers as a table.
func (a *app) printConsumers(consumers []admin.ConsumerInfo) error {
	w := a.table()
	fmt.Fprintln(w, "CONSUMER\tPENDING\tIDLE\tDEAD")
	for _, c := range consumers {
		dead := ""
		if c.Dead {
			dead = "dead"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", c.Name, c.Pending, dur(c.Idle), dead)
	}
	return w.Flush()
}
