package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// pauseJSON is what pause and resume print with --json.
type pauseJSON struct {
	ControlKey string `json:"control_key"`
	Group      string `json:"group,omitempty"`
	Key        string `json:"key"`
	Paused     bool   `json:"paused"`
}

func (a *app) pauseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pause KEY [GROUP]",
		Short: "Pause the mounts reading a stream's group or a list: they read nothing new",
		Long: `Pause the mounts reading KEY: a stream's consumer GROUP (Stream and ClaimingStream
mounts), or a list (List and ReliableList mounts; no GROUP). It sets the control key
beside KEY, in its cluster slot ('{orders}:paused:workers' for the stream orders and
its group workers, '{jobs}:paused' for the list jobs). Within a second each mount
reads nothing new; it finishes and settles what it holds, and stops gracefully as
ever. Pausing twice is pausing once; nothing else changes. 'settle resume' undoes it.

A stream needs its group, and the group must exist. A Pub/Sub channel cannot be
paused (Redis keeps nothing for a subscriber: what is published meanwhile would be
lost). An inbox group is paused with (*inbox.Inbox).Pause.`,
		Args: rangeArgs("KEY", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, grp := keyGroup(args)
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			if err := a.insp.Pause(cmd.Context(), key, grp); err != nil {
				return err
			}
			return a.printPause(key, grp, true)
		},
	}
}

func (a *app) resumeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume KEY [GROUP]",
		Short: "Resume the mounts 'settle pause' paused",
		Long: `Resume the mounts reading KEY (a stream's consumer GROUP, or a list with no GROUP)
that 'settle pause' paused: it deletes the control key, and within a second each mount
reads again. Resuming what is not paused changes nothing.`,
		Args: rangeArgs("KEY", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, grp := keyGroup(args)
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			if err := a.insp.Resume(cmd.Context(), key, grp); err != nil {
				return err
			}
			return a.printPause(key, grp, false)
		},
	}
}

func (a *app) printPause(key, grp string, paused bool) error {
	control := admin.ControlKey(key, grp)
	if a.json {
		return a.printJSON(pauseJSON{ControlKey: control, Group: grp, Key: key, Paused: paused})
	}
	what := key
	if grp != "" {
		what = fmt.Sprintf("%s group %s", key, grp)
	}
	if paused {
		_, err := fmt.Fprintf(a.stdout, "paused %s (control key %s): its mounts read nothing new within a second\n", what, control)
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "resumed %s (control key %s deleted): its mounts read again within a second\n", what, control)
	return err
}

// rangeArgs requires the first name and allows the second.
func rangeArgs(required, optional string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return usagef("%s takes %s and optionally %s, got %d argument(s)", cmd.CommandPath(), required, optional, len(args))
		}
		return nil
	}
}

// keyGroup splits KEY [GROUP].
func keyGroup(args []string) (key, grp string) {
	if len(args) > 1 {
		return args[0], args[1]
	}
	return args[0], ""
}
