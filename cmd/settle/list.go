package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

func (a *app) listCommand() *cobra.Command {
	return group("list", "Lists: a reliable list's consumers, a dead-letter list",
		a.listLsCommand(),
		group("dlq", "Dead-letter lists: list, replay, purge", a.dlqLsCommand(a.lists()), a.dlqReplayCommand(a.lists()), a.dlqPurgeCommand(a.lists())))
}

// listJSON is admin.ReliableListInfo as list ls --json and stats print it.
type listJSON struct {
	Consumers  []listConsumerJSON `json:"consumers"`
	Key        string             `json:"key"`
	Length     int64              `json:"length"`
	Orphaned   []string           `json:"orphaned"`
	Paused     bool               `json:"paused"`
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

// listJSONOf is l as --json prints it, paused as admin's Inspector.Paused says.
func listJSONOf(l *admin.ReliableListInfo, paused bool) listJSON {
	j := listJSON{Consumers: []listConsumerJSON{}, Key: l.Key, Length: l.Length, Orphaned: l.Orphaned, Paused: paused, Processing: l.Processing}
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
or expired with items left (orphaned: a live consumer takes them over), and whether its
mounts are paused (settle pause KEY). A plain list has no consumers.`,
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
			paused, err := a.insp.Paused(cmd.Context(), args[0], "")
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(listJSONOf(l, paused))
			}
			fmt.Fprintf(a.stdout, "%s: %d waiting, %d processing, %d consumers (%d orphaned)\n", l.Key, l.Length, l.Processing, len(l.Consumers), len(l.Orphaned))
			if paused {
				fmt.Fprintf(a.stdout, "  paused: its mounts read nothing new (settle resume %s)\n", l.Key)
			}
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

// store is what the dlq commands read and act on: dead-letter streams (dlq) or
// dead-letter lists (list dlq), each through admin's one DeadLetterStore.
type store struct {
	note          string // a paragraph that ends the commands' help
	noun          string // "stream" or "list"
	open          func(key string) admin.DeadLetterStore
	replayExample string
}

// streams is the store of dead-letter streams. open calls a.insp, set once the command
// connects.
func (a *app) streams() store {
	return store{
		noun: "stream",
		open: func(key string) admin.DeadLetterStore { return a.insp.StreamDeadLetters(key) },
		replayExample: `  settle dlq replay '{refunds}.dlq' --reason unavailable --rate 50
  settle dlq replay '{refunds}.dlq' --id 1700000000000-0 --yes`,
	}
}

// lists is the store of dead-letter lists (a List or ReliableList mount's DeadLetter).
func (a *app) lists() store {
	return store{
		note: `

A list member has no id: each is named by its index (0 first, from the head), which --id
takes, and dated by its settle-dead-at header, which --since and --until read. A missing
KEY is an empty dead-letter list (Redis deletes an emptied list), and for the same reason
a destination list that does not exist is no error: the replay makes it. A replay appends
each to its list (as the publisher does) in one script that removes the exact member and
pushes only if it removed it.`,
		noun: "list",
		open: func(key string) admin.DeadLetterStore { return a.insp.ListDeadLetterStore(key) },
		replayExample: `  settle list dlq replay '{jobs}.dlq' --reason unavailable --rate 50
  settle list dlq replay '{jobs}.dlq' --id 0 --yes`,
	}
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
	paused, err := a.insp.Paused(ctx, st.Key, "")
	if err != nil {
		return st, err
	}
	j := listJSONOf(l, paused)
	st.Kind, st.List = kindList, &j
	return st, nil
}

// summaryJSONOf is s as --json prints it.
func summaryJSONOf(s *admin.DeadLetterSummary) summaryJSON {
	return summaryJSON{
		ByError: groupsJSON(s.ByError), ByReason: groupsJSON(s.ByReason), BySource: groupsJSON(s.BySource),
		Count: s.Count, Key: s.Key, Newest: s.Newest, NewestAt: timeOrNil(s.NewestAt),
		Oldest: s.Oldest, OldestAt: timeOrNil(s.OldestAt), Sampled: s.Sampled, Total: s.Total,
	}
}
