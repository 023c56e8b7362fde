package main

import (
	"fmt"

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
				for _, p := range info.Partitions {
					if err := a.printJSON(partitionJSON{DeadLetters: p.DeadLetters, Index: p.Index, Key: p.Key, Lag: p.Lag, LeaseLeftMS: p.LeaseLeft.Milliseconds(),
						Length: p.Length, Owner: p.Owner, Pending: p.Pending, Token: p.Token}); err != nil {
						return err
					}
				}
				for _, m := range info.Members {
					if err := a.printJSON(memberJSON{Member: m.Name, Owns: m.Owns, TTLMS: m.TTL.Milliseconds()}); err != nil {
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
