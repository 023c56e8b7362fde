package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// delayedMemberJSON is one admin.DelayedMember as --json prints it.
type delayedMemberJSON struct {
	Due     time.Time         `json:"due"`
	Handle  string            `json:"handle"`
	Headers map[string]string `json:"headers,omitempty"`
}

// delayResultJSON is admin.DelayResult as delayed promote|cancel --json prints it.
type delayResultJSON struct {
	Done   []delayedMemberJSON `json:"done"`
	DryRun bool                `json:"dry_run"`
	Due    []string            `json:"due"`
	Gone   []string            `json:"gone"`
	Key    string              `json:"key"`
}

func delayedMemberJSONOf(d admin.DelayedMember) delayedMemberJSON {
	return delayedMemberJSON{Due: d.Due, Handle: d.Handle, Headers: d.Headers}
}

// delayedMembers prints the members of the delay set key, at most limit (delayed ls
// --members).
func (a *app) delayedMembers(ctx context.Context, key string, limit int) error {
	members, err := a.insp.DelayedMembers(ctx, key, limit)
	if err != nil {
		return err
	}
	return a.printDelayedMembers(members)
}

// printDelayedMembers prints the members of a delay set (delayed ls --members).
func (a *app) printDelayedMembers(members []admin.DelayedMember) error {
	if a.json {
		for _, d := range members {
			if err := a.printJSON(delayedMemberJSONOf(d)); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "MEMBER\tDUE")
	for _, d := range members {
		fmt.Fprintf(w, "%s\t%s\n", d.Handle, d.Due.Local().Format(time.RFC3339Nano))
	}
	return w.Flush()
}

// delayAct is an Inspector's Promote or Cancel.
type delayAct func(i *admin.Inspector, ctx context.Context, key string, f admin.DelayFilter, opts ...admin.DelayOption) (*admin.DelayResult, error)

// delayedAction is delayed promote or cancel: verb and act name what it does; all says
// whether it takes --all.
func (a *app) delayedAction(use, short, long, verb string, all bool, act delayAct) *cobra.Command {
	var af actionFlags
	var every bool
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("%s takes KEY and the members (or --all)", cmd.CommandPath())
			case every && len(args) > 1:
				return usagef("%s takes members or --all, not both", cmd.CommandPath())
			case !every && len(args) < 2:
				return usagef("%s takes KEY MEMBER...%s", cmd.CommandPath(), map[bool]string{true: " (or --all)"}[all])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			key := args[0]
			f := admin.DelayFilter{All: every, Members: args[1:]}
			return twoPass(a, af,
				func() (*admin.DelayResult, int, string, error) {
					dry, err := act(a.insp, cmd.Context(), key, f, admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.Done), fmt.Sprintf("%s %d members of delay set %q", verb, len(dry.Done), key), nil
				},
				func(*admin.DelayResult) (*admin.DelayResult, error) { return act(a.insp, cmd.Context(), key, f) },
				func(r *admin.DelayResult) error { return a.printDelayResult(verb, r) })
		},
	}
	af.add(c)
	if all {
		c.Flags().BoolVar(&every, "all", false, "every member of the set")
	}
	return c
}

func (a *app) delayedPromoteCommand() *cobra.Command {
	return a.delayedAction("promote KEY MEMBER...|--all",
		"Make members of the delay set KEY due now: the next read's sweep delivers them",
		`Make the members MEMBER... (as delayed ls --members names them) of the durable delay set
KEY, or --all, due now by the Redis server's clock: a consumer's next sweep moves them
back. What each retry copy holds, its attempt included, is unchanged. A member due
already is left as it is; a member not in the set is refused, and nothing changes.`,
		"promote", true, (*admin.Inspector).Promote)
}

func (a *app) delayedCancelCommand() *cobra.Command {
	return a.delayedAction("cancel KEY MEMBER...",
		"Remove members of the delay set KEY: they are never delivered",
		`Remove the members MEMBER... (as delayed ls --members names them) of the durable delay
set KEY: those retry copies are never delivered. A member not in the set is refused,
and nothing changes; --dry-run shows what would be removed.`,
		"cancel", false, (*admin.Inspector).Cancel)
}

func (a *app) printDelayResult(verb string, r *admin.DelayResult) error {
	if r == nil {
		return nil
	}
	if a.json {
		out := delayResultJSON{Done: []delayedMemberJSON{}, DryRun: r.DryRun, Due: nonNil(r.Due), Gone: nonNil(r.Gone), Key: r.Key}
		for _, d := range r.Done {
			out.Done = append(out.Done, delayedMemberJSONOf(d))
		}
		return a.printJSON(out)
	}
	if len(r.Done) > 0 {
		if err := a.printDelayedMembers(r.Done); err != nil {
			return err
		}
	}
	past := map[string]string{"promote": "promoted", "cancel": "cancelled"}[verb]
	if r.DryRun {
		past = "would " + verb
	}
	fmt.Fprintf(a.stdout, "%s %d members of %s", past, len(r.Done), r.Key)
	if len(r.Due) > 0 {
		fmt.Fprintf(a.stdout, "; %d were due already", len(r.Due))
	}
	fmt.Fprintln(a.stdout, goneNote(r.Gone))
	return nil
}
