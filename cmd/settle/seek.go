package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// seekJSON is admin.SeekResult as seek --json prints it.
type seekJSON struct {
	At     *time.Time `json:"at,omitempty"`
	DryRun bool       `json:"dry_run"`
	From   string     `json:"from"`
	Group  string     `json:"group"`
	Key    string     `json:"key"`
	To     string     `json:"to"`
}

func (a *app) seekCommand() *cobra.Command {
	var af actionFlags
	c := &cobra.Command{
		Use:   "seek KEY GROUP ID|TIME",
		Short: "Move KEY's group GROUP to an entry id or a time: the entries after it are delivered again",
		Long: `Move the stream KEY's consumer group GROUP to a position (XGROUP SETID): the entries
after it are delivered again to whichever consumers read next. The position is an
entry id (<ms>-<seq>, <ms>, 0 for the whole stream, $ for its end), a duration ago by
the Redis server's clock (2h, 90m) or an RFC 3339 time; a time stands for the id
<ms>-0 of it. The group must exist; a time in the future is refused.`,
		Example: `  settle seek '{refunds}' refunds 2h --dry-run
  settle seek '{refunds}' refunds 2026-01-02T15:04:05Z --yes`,
		Args: exactArgs("KEY", "GROUP", "ID|TIME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			key, grp, to := args[0], args[1], args[2]
			return twoPass(a, af,
				func() (*admin.SeekResult, int, string, error) {
					dry, err := a.insp.Seek(cmd.Context(), key, grp, to, admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, 1, fmt.Sprintf("move group %q of %q from %s to %s", grp, key, dry.From, dry.To), nil
				},
				func(*admin.SeekResult) (*admin.SeekResult, error) { return a.insp.Seek(cmd.Context(), key, grp, to) },
				func(r *admin.SeekResult) error {
					if r == nil {
						return nil
					}
					if a.json {
						return a.printJSON(seekJSON{At: timeOrNil(r.At), DryRun: r.DryRun, From: r.From, Group: r.Group, Key: r.Key, To: r.To})
					}
					verb := "moved"
					if r.DryRun {
						verb = "would move"
					}
					at := ""
					if !r.At.IsZero() {
						at = " (" + r.At.Local().Format(time.RFC3339Nano) + ")"
					}
					fmt.Fprintf(a.stdout, "%s group %s of %s from %s to %s%s\n", verb, r.Group, r.Key, r.From, r.To, at)
					return nil
				})
		},
	}
	af.add(c)
	return c
}
