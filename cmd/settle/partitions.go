package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// partitionJSON is one partition as partitions ls --json prints it.
type partitionJSON struct {
	DeadLetters int64  `json:"dead_letters"`
	Index       int    `json:"index"`
	Key         string `json:"key"`
	Lag         int64  `json:"lag"`
	LeaseLeftMS int64  `json:"lease_left_ms"`
	Length      int64  `json:"length"`
	Owner       string `json:"owner"`
	Pending     int64  `json:"pending"`
	Token       string `json:"token"`
}

// memberJSON is one live member as partitions ls --json prints it.
type memberJSON struct {
	Member string `json:"member"`
	Owns   int    `json:"owns"`
	TTLMS  int64  `json:"ttl_ms"`
}

// partitionedJSON is a partitioned stream's group as stats --json prints it: its
// partitions and its live members.
type partitionedJSON struct {
	DeadLetter string          `json:"dead_letter,omitempty"`
	Group      string          `json:"group"`
	Hash       string          `json:"hash"`
	Members    []memberJSON    `json:"members"`
	Name       string          `json:"name"`
	Partitions []partitionJSON `json:"partitions"`
}

// partitionedJSONOf is info as --json prints it (durations in milliseconds), its dead
// letters counted in each partition's copy of deadLetter ("": not counted).
func partitionedJSONOf(info *admin.PartitionedStreamInfo, deadLetter string) partitionedJSON {
	out := partitionedJSON{DeadLetter: deadLetter, Group: info.Group, Hash: info.Hash, Members: []memberJSON{}, Name: info.Name, Partitions: []partitionJSON{}}
	for _, p := range info.Partitions {
		out.Partitions = append(out.Partitions, partitionJSON{DeadLetters: p.DeadLetters, Index: p.Index, Key: p.Key, Lag: p.Lag,
			LeaseLeftMS: p.LeaseLeft.Milliseconds(), Length: p.Length, Owner: p.Owner, Pending: p.Pending, Token: p.Token})
	}
	for _, m := range info.Members {
		out.Members = append(out.Members, memberJSON{Member: m.Name, Owns: m.Owns, TTLMS: m.TTL.Milliseconds()})
	}
	return out
}

// partitionDetails is the DETAILS of a partition in the stats table: its owner, lease
// and backlog, its dead letters where counted.
func partitionDetails(p partitionJSON, dead bool) string {
	owner := "no owner"
	if p.Owner != "" {
		owner = fmt.Sprintf("owner %s (lease left %s, token %s)", p.Owner, dur(time.Duration(p.LeaseLeftMS)*time.Millisecond), p.Token)
	}
	lag := fmt.Sprint(p.Lag)
	if p.Lag < 0 {
		lag = "?"
	}
	d := fmt.Sprintf("%s: lag %s, pending %d", owner, lag, p.Pending)
	if dead {
		d += fmt.Sprintf(", dead letters %d", p.DeadLetters)
	}
	return d
}

func (a *app) partitionsCommand() *cobra.Command {
	var deadLetter string
	ls := &cobra.Command{
		Use:   "ls NAME GROUP",
		Short: "List the partitions of the partitioned stream NAME for GROUP: owner, lease, backlog",
		Long: `List each partition of the partitioned stream NAME as its consumer group GROUP holds
it: the member holding its lease (none: it waits for a member to take it), the lease's
time left and fencing token, the partition's length, lag, pending entries and, with
--dead-letter (the name given to settle.DeadLetter), its dead letters; then the group's
live members and how many partitions each holds. With --json, one object per partition,
then one per member.`,
		Example: `  settle partitions ls orders workers --dead-letter orders.dlq`,
		Args:    exactArgs("NAME", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			info, err := a.insp.PartitionedStream(cmd.Context(), args[0], args[1], admin.PartitionDeadLetter(deadLetter))
			if err != nil {
				return err
			}
			if a.json {
				j := partitionedJSONOf(info, deadLetter)
				for _, p := range j.Partitions {
					if err := a.printJSON(p); err != nil {
						return err
					}
				}
				for _, m := range j.Members {
					if err := a.printJSON(m); err != nil {
						return err
					}
				}
				return nil
			}
			w := a.table()
			fmt.Fprintln(w, "PARTITION\tKEY\tOWNER\tLEASE LEFT\tTOKEN\tLENGTH\tLAG\tPENDING\tDEAD")
			for _, p := range info.Partitions {
				owner, left, lag, token := p.Owner, dur(p.LeaseLeft), fmt.Sprint(p.Lag), p.Token
				if owner == "" {
					owner, left = "(none)", "-"
				}
				if token == "" {
					token = "-"
				}
				if p.Lag < 0 {
					lag = "?"
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\n", p.Index, p.Key, owner, left, token, p.Length, lag, p.Pending, p.DeadLetters)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "\n%d live members of group %s (hash %s):\n", len(info.Members), info.Group, info.Hash)
			w = a.table()
			fmt.Fprintln(w, "MEMBER\tOWNS\tHEARTBEAT LEFT")
			for _, m := range info.Members {
				fmt.Fprintf(w, "%s\t%d\t%s\n", m.Name, m.Owns, dur(m.TTL))
			}
			return w.Flush()
		},
	}
	ls.Flags().StringVar(&deadLetter, "dead-letter", "", "the mount's dead-letter `NAME` (as given to settle.DeadLetter): count each partition's dead letters")
	return group("partitions", "Partitioned streams: each partition's owner, lease and backlog", ls)
}
