package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

func (a *app) listCommand() *cobra.Command {
	return group("list", "Lists: a reliable list's consumers, a dead-letter list",
		a.listLsCommand(),
		group("dlq", "Dead-letter lists: list, replay, purge", a.listDlqLsCommand(), a.listDlqReplayCommand(), a.listDlqPurgeCommand()))
}

// listJSON is admin.ReliableListInfo as list ls --json and stats print it.
type listJSON struct {
	Consumers  []listConsumerJSON `json:"consumers"`
	Key        string             `json:"key"`
	Length     int64              `json:"length"`
	Orphaned   []string           `json:"orphaned"`
	Processing int64              `json:"processing"`
}

type listConsumerJSON struct {
	Alive          bool   `json:"alive"`
	HeartbeatTTLMs int64  `json:"heartbeat_ttl_ms"`
	Name           string `json:"name"`
	Orphaned       bool   `json:"orphaned"`
	Processing     int64  `json:"processing"`
	ProcessingKey  string `json:"processing_key"`
}

func listJSONOf(l *admin.ReliableListInfo) listJSON {
	j := listJSON{Consumers: []listConsumerJSON{}, Key: l.Key, Length: l.Length, Orphaned: l.Orphaned, Processing: l.Processing}
	if j.Orphaned == nil {
		j.Orphaned = []string{}
	}
	for _, c := range l.Consumers {
		j.Consumers = append(j.Consumers, listConsumerJSON{Alive: c.Alive, HeartbeatTTLMs: ms(c.HeartbeatTTL), Name: c.Name,
			Orphaned: c.Orphaned, Processing: c.Processing, ProcessingKey: c.ProcessingKey})
	}
	return j
}

func (a *app) listLsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ls KEY",
		Short: "Show the reliable list KEY: its length, each consumer's processing list and heartbeat",
		Long: `Show the list KEY: how many items wait in it and, for a reliable list, each consumer
of its consumer set with its processing list's length and whether its heartbeat is alive,
or expired with items left (orphaned: a live consumer takes them over). A plain list has
no consumers.`,
		Example: `  settle list ls '{jobs}'`,
		Args:    exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			l, err := a.insp.ReliableList(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(listJSONOf(l))
			}
			fmt.Fprintf(a.stdout, "%s: %d waiting, %d processing, %d consumers (%d orphaned)\n", l.Key, l.Length, l.Processing, len(l.Consumers), len(l.Orphaned))
			if len(l.Consumers) == 0 {
				return nil
			}
			w := a.table()
			fmt.Fprintln(w, "CONSUMER\tPROCESSING\tHEARTBEAT")
			for _, c := range l.Consumers {
				hb := "alive (" + dur(c.HeartbeatTTL) + " left)"
				switch {
				case c.Orphaned:
					hb = "expired: orphaned"
				case !c.Alive:
					hb = "expired"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\n", c.Name, c.Processing, hb)
			}
			return w.Flush()
		},
	}
}

// listSelected is selected for a dead-letter list: --id takes indexes, and --reason is
// matched here against the reason and the last error (see resolve), its matches handed
// to admin as indexes.
func (a *app) listSelected(ctx context.Context, key string, ff *filterFlags) (f admin.Filter, none bool, err error) {
	sel, err := ff.selector(time.Now())
	if err != nil {
		return admin.Filter{}, false, err
	}
	if err := a.connect(ctx); err != nil {
		return admin.Filter{}, false, err
	}
	if sel.reason == nil {
		return sel.filter, false, nil
	}
	dls, err := a.insp.ListDeadLetters(ctx, key, sel.filter, 0)
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

func (a *app) listDlqLsCommand() *cobra.Command {
	var ff filterFlags
	var entries bool
	var limit int
	c := &cobra.Command{
		Use:   "ls KEY",
		Short: "Count the dead letters of the dead-letter list KEY, grouped by reason, normalised error and source",
		Long: `Count the dead letters of the dead-letter list KEY (a List or ReliableList mount's
DeadLetter), grouped as dlq ls groups a stream's. A list member has no id: each is named
by its index (0 first, from the head), which --id takes, and dated by its settle-dead-at
header, which --since and --until read. A missing KEY is an empty dead-letter list
(Redis deletes an emptied list). With --entries, list them instead.`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, none, err := a.listSelected(cmd.Context(), args[0], &ff)
			if err != nil {
				return err
			}
			switch {
			case entries && none:
				return a.printDeadLetters(nil)
			case entries:
				lds, err := a.insp.ListDeadLetters(cmd.Context(), args[0], f, limit)
				if err != nil {
					return err
				}
				dls := make([]admin.DeadLetter, len(lds))
				for k, d := range lds {
					dls[k] = d.DeadLetter
				}
				return a.printDeadLetters(dls)
			case none:
				return a.printSummary(&admin.DeadLetterSummary{Key: args[0]})
			}
			s, err := a.insp.ListDeadLetterSummary(cmd.Context(), args[0], f)
			if err != nil {
				return err
			}
			return a.printSummary(s)
		},
	}
	ff.add(c)
	c.Flags().BoolVar(&entries, "entries", false, "list the dead letters instead of the summary")
	c.Flags().IntVar(&limit, "limit", 0, "with --entries, list at most `N` (0: all)")
	return c
}

func (a *app) listDlqReplayCommand() *cobra.Command {
	var ff filterFlags
	var af actionFlags
	var limit int
	var rate float64
	var to string
	c := &cobra.Command{
		Use:   "replay KEY",
		Short: "Move dead letters of the dead-letter list KEY back to the list they came from, attempts reset",
		Long: `Move the dead letters of the dead-letter list KEY that the filters select (all without
a filter) back to the list each came from, or to --to, from the head. Each goes back
(appended, as the publisher appends) with settle's own headers removed and a
settle-replayed-from header; each moves in one script that removes the exact member and
pushes only if it removed it, so a replay run again moves nothing twice. The selection is
checked first, as dlq replay checks a stream's.`,
		Example: `  settle list dlq replay '{jobs}.dlq' --reason unavailable --rate 50`,
		Args:    exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			f, none, err := a.listSelected(cmd.Context(), key, &ff)
			if err != nil {
				return err
			}
			if none {
				return a.printReplay(key, &admin.ReplayResult{DryRun: af.dryRun})
			}
			opts := []admin.ReplayOption{admin.Limit(limit), admin.Rate(rate)}
			if to != "" {
				opts = append(opts, admin.To(to))
			}
			return twoPass(a, af,
				func() (*admin.ReplayResult, int, string, error) {
					dry, err := a.insp.ReplayList(cmd.Context(), key, f, append(opts, admin.DryRun())...)
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.Replayed), fmt.Sprintf("replay %d dead letters of %q to %s", len(dry.Replayed), key, destinations(dry)), nil
				},
				func() (*admin.ReplayResult, error) { return a.insp.ReplayList(cmd.Context(), key, f, opts...) },
				func(r *admin.ReplayResult) error { return a.printReplay(key, r) })
		},
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "replay at most `N`, from the head (0: all)")
	c.Flags().Float64Var(&rate, "rate", 0, "replay at most `N` a second (0: as fast as Redis answers)")
	c.Flags().StringVar(&to, "to", "", "replay to this list `KEY` instead of each dead letter's source")
	return c
}

func (a *app) listDlqPurgeCommand() *cobra.Command {
	var ff filterFlags
	var af actionFlags
	var limit int
	c := &cobra.Command{
		Use:   "purge KEY",
		Short: "Delete dead letters of the dead-letter list KEY",
		Long: `Delete the dead letters of the dead-letter list KEY that the filters select (all
without a filter), each by its exact member; a purge run again deletes nothing more.`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			f, none, err := a.listSelected(cmd.Context(), key, &ff)
			if err != nil {
				return err
			}
			if none {
				return a.printPurge(key, &admin.PurgeResult{DryRun: af.dryRun})
			}
			return twoPass(a, af,
				func() (*admin.PurgeResult, int, string, error) {
					dry, err := a.insp.PurgeList(cmd.Context(), key, f, admin.Limit(limit), admin.DryRun())
					if err != nil {
						return nil, 0, "", err
					}
					return dry, len(dry.IDs), fmt.Sprintf("delete %d dead letters of %q", len(dry.IDs), key), nil
				},
				func() (*admin.PurgeResult, error) { return a.insp.PurgeList(cmd.Context(), key, f, admin.Limit(limit)) },
				func(r *admin.PurgeResult) error { return a.printPurge(key, r) })
		},
	}
	ff.add(c)
	af.add(c)
	c.Flags().IntVar(&limit, "limit", 0, "delete at most `N`, from the head (0: all)")
	return c
}

// statList is stat for a list: a dead-letter list when its first member is a dead
// letter (it carries settle-dead-source), else a (reliable) list.
func (a *app) statList(ctx context.Context, st statJSON) (statJSON, error) {
	first, err := a.insp.ListDeadLetters(ctx, st.Key, admin.Filter{}, 1)
	if err != nil {
		return st, err
	}
	if len(first) == 1 && first[0].Source != "" {
		s, err := a.insp.ListDeadLetterSummary(ctx, st.Key, admin.Filter{})
		if err != nil {
			return st, err
		}
		j := summaryJSONOf(s)
		st.Kind, st.DeadLetters = kindDeadLetters, &j
		return st, nil
	}
	l, err := a.insp.ReliableList(ctx, st.Key)
	if err != nil {
		return st, err
	}
	j := listJSONOf(l)
	st.Kind, st.List = kindList, &j
	return st, nil
}

// summaryJSONOf is s as --json prints it.
func summaryJSONOf(s *admin.DeadLetterSummary) summaryJSON {
	return summaryJSON{
		ByError: groupsJSON(s.ByError), ByReason: groupsJSON(s.ByReason), BySource: groupsJSON(s.BySource),
		Count: s.Count, Key: s.Key, Newest: s.Newest, NewestAt: timeOrNil(s.NewestAt),
		Oldest: s.Oldest, OldestAt: timeOrNil(s.OldestAt),
	}
}
