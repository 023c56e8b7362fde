package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// streamJSON is admin.StreamInfo as --json prints it (durations in milliseconds).
type streamJSON struct {
	Consumers               []consumerJSON `json:"consumers"`
	Dead                    []string       `json:"dead"`
	EntriesRead             int64          `json:"entries_read"`
	Group                   string         `json:"group"`
	Key                     string         `json:"key"`
	Lag                     int64          `json:"lag"`
	LastDeliveredID         string         `json:"last_delivered_id"`
	Length                  int64          `json:"length"`
	OldestPendingAgeMs      int64          `json:"oldest_pending_age_ms"`
	OldestPendingDeliveries int64          `json:"oldest_pending_deliveries"`
	OldestPendingID         string         `json:"oldest_pending_id,omitempty"`
	OldestPendingIdleMs     int64          `json:"oldest_pending_idle_ms"`
	Paused                  bool           `json:"paused"`
	Pending                 int64          `json:"pending"`
	ReclaimIdleMs           int64          `json:"reclaim_idle_ms"`
}

type consumerJSON struct {
	Dead    bool   `json:"dead"`
	IdleMs  int64  `json:"idle_ms"`
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
}

func streamJSONOf(s *admin.StreamInfo) streamJSON {
	out := streamJSON{
		Consumers: []consumerJSON{}, Dead: s.Dead, EntriesRead: s.EntriesRead, Group: s.Group, Key: s.Key,
		Lag: s.Lag, LastDeliveredID: s.LastDeliveredID, Length: s.Length,
		OldestPendingAgeMs: ms(s.OldestPendingAge), OldestPendingDeliveries: s.OldestPendingDeliveries,
		OldestPendingID: s.OldestPendingID, OldestPendingIdleMs: ms(s.OldestPendingIdle),
		Paused: s.Paused, Pending: s.Pending, ReclaimIdleMs: ms(s.ReclaimIdle),
	}
	if out.Dead == nil {
		out.Dead = []string{}
	}
	for _, c := range s.Consumers {
		out.Consumers = append(out.Consumers, consumerJSON{Dead: c.Dead, IdleMs: ms(c.Idle), Name: c.Name, Pending: c.Pending})
	}
	return out
}

func (a *app) pendingCommand() *cobra.Command {
	var reclaim time.Duration
	var entries bool
	var pf admin.PendingFilter
	var limit int
	ls := &cobra.Command{
		Use:   "ls KEY GROUP",
		Short: "Show the stream KEY's group GROUP: lag, pending entries, consumers, dead consumers",
		Long: `Show the stream KEY and its consumer group GROUP: length, entries read, lag, pending
entries and the oldest of them, whether its mounts are paused (settle pause), and each
consumer's pending count and idle time. A
consumer that holds pending entries and has been idle past --reclaim-idle (give the
mount's settle.Reclaim) is dead: its process probably died.

With --entries, list the pending entries instead, a page at a time (--limit, --after the
last id shown), each with the consumer holding it, its idle time and its deliveries;
--consumer lists one consumer's. pending release and pending dead take these ids, or
--consumer / --all.`,
		Example: `  settle pending ls '{refunds}' refunds
  settle pending ls '{refunds}' refunds --entries --consumer worker-7 --limit 50`,
		Args: exactArgs("KEY", "GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			if entries {
				ps, err := a.insp.PendingEntries(cmd.Context(), args[0], args[1], pf, limit)
				if err != nil {
					return err
				}
				return a.printPendingEntries(ps, limit)
			}
			s, err := a.insp.Stream(cmd.Context(), args[0], args[1], admin.ReclaimIdle(reclaim))
			if err != nil {
				return err
			}
			return a.printStream(s)
		},
	}
	ls.Flags().DurationVar(&reclaim, "reclaim-idle", settle.DefaultReclaim, "idle past which a consumer holding entries counts as dead")
	ls.Flags().BoolVar(&entries, "entries", false, "list the pending entries (a page) instead of the group")
	ls.Flags().StringVar(&pf.Consumer, "consumer", "", "with --entries, only those pending at this `CONSUMER`")
	ls.Flags().StringVar(&pf.After, "after", "", "with --entries, the page after this entry `ID`")
	ls.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("with --entries, at most `N` (up to %d)", admin.MaxPendingPage))
	return group("pending", "A stream's consumer group and its pending entries", ls, a.pendingReleaseCommand(), a.pendingDeadCommand())
}

func (a *app) printStream(s *admin.StreamInfo) error {
	if a.json {
		return a.printJSON(streamJSONOf(s))
	}
	lag := fmt.Sprint(s.Lag)
	if s.Lag < 0 {
		lag = "unknown"
	}
	fmt.Fprintf(a.stdout, "stream %s, group %s\n", s.Key, s.Group)
	if s.Paused {
		fmt.Fprintf(a.stdout, "  paused: its mounts read nothing new (settle resume %s %s)\n", s.Key, s.Group)
	}
	fmt.Fprintf(a.stdout, "  length %d, entries read %d, lag %s, last delivered %s\n", s.Length, s.EntriesRead, lag, orDash(s.LastDeliveredID))
	fmt.Fprintf(a.stdout, "  pending %d", s.Pending)
	if s.Pending > 0 {
		fmt.Fprintf(a.stdout, "; oldest %s: added %s ago, idle %s, delivered %d times", s.OldestPendingID, dur(s.OldestPendingAge), dur(s.OldestPendingIdle), s.OldestPendingDeliveries)
	}
	fmt.Fprintf(a.stdout, "\n  dead consumers (holding entries, idle past %s): %d\n\n", s.ReclaimIdle, len(s.Dead))
	return a.printConsumers(s.Consumers)
}

// delaySetJSON is admin.DelaySetInfo as --json prints it.
type delaySetJSON struct {
	Key             string     `json:"key"`
	NextDue         *time.Time `json:"next_due,omitempty"`
	Now             time.Time  `json:"now"`
	OldestOverdueMs int64      `json:"oldest_overdue_ms"`
	Overdue         int64      `json:"overdue"`
	Size            int64      `json:"size"`
}

func delaySetJSONOf(d *admin.DelaySetInfo) delaySetJSON {
	return delaySetJSON{Key: d.Key, NextDue: timeOrNil(d.NextDue), Now: d.Now, OldestOverdueMs: ms(d.OldestOverdue), Overdue: d.Overdue, Size: d.Size}
}

func (a *app) delayedCommand() *cobra.Command {
	var members int
	ls := &cobra.Command{
		Use:   "ls KEY",
		Short: "Show the durable delay set KEY: size, next due, overdue",
		Long: `Show the durable delay set KEY (a sorted set): how many delayed messages it holds,
when the next is due, and how many are overdue (due by the Redis server's clock and
not yet swept back; a count that stays up means no consumer is reading). A missing key
is an empty set.`,
		Args: exactArgs("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			if cmd.Flags().Changed("members") {
				return a.delayedMembers(cmd.Context(), args[0], members)
			}
			d, err := a.insp.DelaySet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(delaySetJSONOf(d))
			}
			fmt.Fprintf(a.stdout, "delay set %s: %d delayed\n", d.Key, d.Size)
			if d.Size > 0 {
				fmt.Fprintf(a.stdout, "  next due %s\n  overdue %d", d.NextDue.Local().Format(time.RFC3339Nano), d.Overdue)
				if d.Overdue > 0 {
					fmt.Fprintf(a.stdout, ", the oldest for %s", dur(d.OldestOverdue))
				}
				fmt.Fprintln(a.stdout)
			}
			return nil
		},
	}
	ls.Flags().IntVar(&members, "members", 0, "list the members instead, earliest due first, at most `N` (0: all)")
	ls.Flags().Lookup("members").NoOptDefVal = "0"
	return group("delayed", "A durable delay set", ls, a.delayedPromoteCommand(), a.delayedCancelCommand())
}

// statJSON is one key of stats --json: Kind says which view is filled in.
type statJSON struct {
	DeadLetters *summaryJSON     `json:"dead_letters,omitempty"`
	DelaySet    *delaySetJSON    `json:"delay_set,omitempty"`
	Key         string           `json:"key"`
	Kind        string           `json:"kind"`
	Length      *int64           `json:"length,omitempty"`
	List        *listJSON        `json:"list,omitempty"`
	Partitioned *partitionedJSON `json:"partitioned,omitempty"`
	Paused      bool             `json:"paused,omitempty"`
	Stream      *streamJSON      `json:"stream,omitempty"`
	Type        string           `json:"type"`
}

// Kinds of key stats tells apart.
const (
	kindDeadLetters = "dead-letters"
	kindDelaySet    = "delay-set"
	kindList        = "list"
	kindMissing     = "missing"
	kindOther       = "other"
	kindPartitioned = "partitioned-stream"
	kindStream      = "stream"
)

func (a *app) statsCommand() *cobra.Command {
	var dsn, groupName, mount string
	var reclaim time.Duration
	c := &cobra.Command{
		Use:   "stats [KEY...]",
		Short: "One screen of counts for the keys named, or for the mounts and inboxes of --config",
		Long: `Show one line per key: a stream that has the consumer group --group is shown as a
stream (length, lag, pending, dead consumers, paused); a stream whose oldest entry is a dead
letter as a dead-letter stream (count, oldest, the most common reason and error); any
other stream by its length; a partitioned stream's name (its meta key, a hash) as a
partitioned stream: a line for --group, a line per partition (its owner, lease left,
fencing token, length, lag, pending; its dead letters with the mount's dead_letter in
--config) and a line per live member of --group (how many partitions it holds);
a sorted set as a delay set (size, overdue); a list whose
first member is a dead letter as a dead-letter list, any other list as a (reliable) list
(length, processing, consumers, orphaned, paused). A
missing key is shown as missing (an empty delay set is one); other types are named.

With --config FILE and no KEY: every mount the file names, by its kind (its stream and
group, its partitions and live members, or its list; whether it is paused; its delay set and its dead letter, a missing
list, delay set or dead letter counted empty), then every group and dead letter of its
inboxes (the database: --dsn, else $` + EnvDSN + `, else the file's "dsn"). --mount NAME
shows that mount only. A mount whose stream or group does not exist is an error naming it.`,
		Example: `  settle stats '{refunds}' '{refunds}.dlq' '{refunds}.delayed' --group refunds
  settle stats --config settle.json
  settle stats --config settle.json --mount refunds --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 0 && mount != "":
				return usagef("%s: --mount names a mount of --config; give it no keys", cmd.CommandPath())
			case len(args) == 0 && a.configPath == "":
				return usagef("%s takes one or more keys, or --config FILE naming the mounts", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return a.statConfig(cmd.Context(), mount, dsn, reclaim)
			}
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			var stats []statJSON
			for _, key := range args {
				st, err := a.stat(cmd.Context(), key, groupName, reclaim)
				if err != nil {
					return err
				}
				stats = append(stats, st)
			}
			return a.printStats(stats)
		},
	}
	c.Flags().StringVar(&groupName, "group", "", "the consumer `GROUP` of the streams named as keys")
	c.Flags().StringVar(&mount, "mount", "", "with --config: show only the mount `NAME`")
	c.Flags().StringVar(&dsn, "dsn", "", "with --config: the database `DSN` of its inboxes (default $"+EnvDSN+", else the file's \"dsn\")")
	c.Flags().DurationVar(&reclaim, "reclaim-idle", settle.DefaultReclaim, "idle past which a consumer holding entries counts as dead")
	return c
}

// stat reads one key, its view chosen by its TYPE.
func (a *app) stat(ctx context.Context, key, groupName string, reclaim time.Duration) (statJSON, error) {
	typ, err := a.rdb.Type(ctx, key).Result()
	if err != nil {
		return statJSON{}, fmt.Errorf("%q: type: %w", key, err)
	}
	st := statJSON{Key: key, Type: typ}
	switch typ {
	case "none":
		st.Kind = kindMissing
	case "zset":
		d, err := a.insp.DelaySet(ctx, key)
		if err != nil {
			return st, err
		}
		j := delaySetJSONOf(d)
		st.Kind, st.DelaySet = kindDelaySet, &j
	case "list":
		return a.statList(ctx, st)
	case "stream":
		if groupName != "" {
			s, err := a.insp.Stream(ctx, key, groupName, admin.ReclaimIdle(reclaim))
			if err == nil {
				j := streamJSONOf(s)
				st.Kind, st.Stream = kindStream, &j
				return st, nil
			}
			if !errors.Is(err, admin.ErrGroupNotFound) {
				return st, err
			}
		}
		dead, err := a.firstIsDeadLetter(ctx, key)
		if err != nil {
			return st, err
		}
		if !dead {
			n, err := a.rdb.XLen(ctx, key).Result()
			if err != nil {
				return st, fmt.Errorf("stream %q: xlen: %w", key, err)
			}
			st.Kind, st.Length = kindStream, &n
			return st, nil
		}
		s, err := a.insp.DeadLetterSummary(ctx, key, admin.Filter{})
		if err != nil {
			return st, err
		}
		st.Kind = kindDeadLetters
		j := summaryJSONOf(s)
		st.DeadLetters = &j
	case "hash":
		return a.statPartitioned(ctx, st, groupName)
	default:
		st.Kind = kindOther
	}
	return st, nil
}

// statPartitioned reads the hash st.Key as a partitioned stream's meta key, for the
// group groupName (none: the partitions' lengths only): any other hash is of kind other.
func (a *app) statPartitioned(ctx context.Context, st statJSON, groupName string) (statJSON, error) {
	info, err := a.insp.PartitionedStream(ctx, st.Key, groupName)
	switch {
	case errors.Is(err, admin.ErrWrongType):
		st.Kind = kindOther
		return st, nil
	case err != nil:
		return st, err
	}
	if groupName != "" {
		if st.Paused, err = a.insp.Paused(ctx, st.Key, groupName); err != nil {
			return st, err
		}
	}
	j := partitionedJSONOf(info, "")
	st.Kind, st.Partitioned = kindPartitioned, &j
	return st, nil
}

// firstIsDeadLetter reports whether the oldest entry of the stream key carries the
// dead-letter source header: stats then reads key as a dead-letter stream.
func (a *app) firstIsDeadLetter(ctx context.Context, key string) (bool, error) {
	first, err := a.rdb.XRangeN(ctx, key, "-", "+", 1).Result()
	if err != nil {
		return false, fmt.Errorf("stream %q: xrange: %w", key, err)
	}
	if len(first) == 0 {
		return false, nil
	}
	_, ok := first[0].Values[settle.HeaderDeadSource]
	return ok, nil
}

func (a *app) printStats(stats []statJSON) error {
	if a.json {
		for _, st := range stats {
			if err := a.printJSON(st); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "KEY\tKIND\tCOUNT\tDETAILS")
	for _, st := range stats {
		switch st.Kind {
		case kindStream:
			s := st.Stream
			if s == nil {
				fmt.Fprintf(w, "%s\tstream\t%d\tno --group given (or not its group), no dead letters\n", st.Key, *st.Length)
				continue
			}
			fmt.Fprintf(w, "%s\tstream\t%d\t%s\n", st.Key, s.Length, streamDetails(s))
		case kindDeadLetters:
			fmt.Fprintf(w, "%s\tdead letters\t%d\t%s\n", st.Key, st.DeadLetters.Count, deadDetails(st.DeadLetters))
		case kindDelaySet:
			fmt.Fprintf(w, "%s\tdelay set\t%d\t%s\n", st.Key, st.DelaySet.Size, delayDetails(st.DelaySet))
		case kindList:
			fmt.Fprintf(w, "%s\treliable list\t%d\t%s\n", st.Key, st.List.Length, listDetails(st.List))
		case kindPartitioned:
			printPartitioned(w, "", st.Partitioned, st.Paused)
		case kindMissing:
			fmt.Fprintf(w, "%s\tmissing\t0\t(or an empty delay set)\n", st.Key)
		default:
			fmt.Fprintf(w, "%s\t%s\t-\tnot a key this command reads\n", st.Key, st.Type)
		}
	}
	return w.Flush()
}

// streamDetails is the DETAILS of a stream's group in the stats table.
func streamDetails(s *streamJSON) string {
	d := fmt.Sprintf("group %s: lag %d, pending %d, consumers %d (%d dead)", s.Group, s.Lag, s.Pending, len(s.Consumers), len(s.Dead))
	if s.Paused {
		d += "; paused"
	}
	return d
}

// listDetails is the DETAILS of a (reliable) list in the stats table.
func listDetails(l *listJSON) string {
	d := fmt.Sprintf("processing %d, consumers %d (%d orphaned)", l.Processing, len(l.Consumers), len(l.Orphaned))
	if l.Paused {
		d += "; paused"
	}
	return d
}

// delayDetails is the DETAILS of a delay set in the stats table.
func delayDetails(d *delaySetJSON) string {
	return fmt.Sprintf("overdue %d (oldest %s)", d.Overdue, dur(time.Duration(d.OldestOverdueMs)*time.Millisecond))
}

// deadDetails is the DETAILS of a dead letter in the stats table: the oldest, the most
// common reason and error.
func deadDetails(d *summaryJSON) string {
	if d.Count == 0 {
		return ""
	}
	details := fmt.Sprintf("oldest %s", d.Oldest)
	if len(d.ByReason) > 0 {
		details += fmt.Sprintf("; %d × %q", d.ByReason[0].Count, d.ByReason[0].Value)
	}
	if len(d.ByError) > 0 {
		details += fmt.Sprintf("; %d × %q", d.ByError[0].Count, d.ByError[0].Value)
	}
	return details
}

// printPendingEntries prints a page of pending entries, and how to ask for the next.
func (a *app) printPendingEntries(ps []admin.PendingEntry, limit int) error {
	if a.json {
		for _, p := range ps {
			if err := a.printJSON(pendingEntryJSONOf(p, "")); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "ENTRY\tCONSUMER\tIDLE\tDELIVERIES")
	for _, p := range ps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", p.ID, p.Consumer, dur(p.Idle), p.Deliveries)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(ps) > 0 && len(ps) == limit {
		fmt.Fprintf(a.stdout, "more: --after %s\n", ps[len(ps)-1].ID)
	}
	return nil
}
