package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/admin"
)

// findFlags are the flags of settle find: where to look and how far.
type findFlags struct {
	dead    string
	delayed string
	group   string
	limit   int
	mount   string
	replies []string
	scan    int
	since   string
	stream  string
	until   string
}

func (a *app) findCommand() *cobra.Command {
	var ff findFlags
	c := &cobra.Command{
		Use:   "find QUERY",
		Short: "Where is a message? Every copy of it: waiting, pending, settled, delayed, dead-lettered, replayed, replied",
		Long: `Find a message by an id or a header and show where each of its copies is now: in the
stream or list (waiting for the group, pending at a consumer — idle how long, delivered how often —
or settled), parked in the delay set (due when), in the dead letter (why, when), replayed
back from a dead letter, and the replies to it.

QUERY is an entry id (of any copy: the first delivery, a retry copy, the dead letter), an
origin id (the settle-origin-id header every copy carries), or a header as name=value
(an order id the producer put in a header, say).

Where: the mounts of --config (--mount NAME: one of them), or the keys named by --stream
(with --group), --delayed, --dead-letter and --replies. How far: each stream from --since
(an id's own time by default; 24 hours back for a header) to --until, at most --scan
entries of each key; at most --limit places. The answer says what range of each key
it read and where the bound stopped it.`,
		Example: `  settle find 1700000000000-0 --config settle.json
  settle find order=42 --stream '{refunds}' --group refunds --delayed '{refunds}.delayed' --dead-letter '{refunds}.dlq' --since 2h`,
		Args: exactArgs("QUERY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := admin.ParseFindQuery(args[0])
			if err != nil {
				return usageError{err}
			}
			now := time.Now()
			if q.Since, err = parseWhen("--since", ff.since, now); err != nil {
				return usageError{err}
			}
			if q.Until, err = parseWhen("--until", ff.until, now); err != nil {
				return usageError{err}
			}
			q.Limit, q.Scan = ff.limit, ff.scan
			scopes, err := a.findScopes(cmd, ff)
			if err != nil {
				return err
			}
			if err := a.connect(cmd.Context()); err != nil {
				return err
			}
			f, err := a.insp.Find(cmd.Context(), scopes, q)
			if err != nil {
				return err
			}
			return a.printFound(f)
		},
	}
	fs := c.Flags()
	fs.StringVar(&ff.mount, "mount", "", "with --config: search the mount `NAME` only")
	fs.StringVar(&ff.stream, "stream", "", "the stream `KEY` the mount reads")
	fs.StringVar(&ff.group, "group", "", "the stream's consumer `GROUP` (tells waiting, pending and settled apart)")
	fs.StringVar(&ff.delayed, "delayed", "", "the delay set `KEY`")
	fs.StringVar(&ff.dead, "dead-letter", "", "the dead-letter stream `KEY`")
	fs.StringArrayVar(&ff.replies, "replies", nil, "a reply stream `KEY` (repeatable)")
	fs.StringVar(&ff.since, "since", "", "read each stream from `T` (RFC 3339, or a duration ago: 2h)")
	fs.StringVar(&ff.until, "until", "", "read each stream up to `T` (RFC 3339, or a duration ago)")
	fs.IntVar(&ff.limit, "limit", admin.DefaultFindLimit, "show at most `N` places")
	fs.IntVar(&ff.scan, "scan", admin.DefaultFindScan, "read at most `N` entries of each key")
	return c
}

// findScopes are the scopes the flags name: the keys given, else the mounts of
// --config (a list mount's list and dead-letter list, a stream mount's stream and dead
// letter; each one's delay set and replies).
func (a *app) findScopes(cmd *cobra.Command, ff findFlags) ([]admin.FindScope, error) {
	keys := ff.stream != "" || ff.delayed != "" || ff.dead != "" || len(ff.replies) > 0
	switch {
	case keys && (a.configPath != "" || ff.mount != ""):
		return nil, usagef("%s: give keys (--stream, --delayed, --dead-letter, --replies) or --config, not both", cmd.CommandPath())
	case keys:
		return []admin.FindScope{{Mount: ff.stream, Stream: ff.stream, Group: ff.group, Delayed: ff.delayed, DeadLetter: ff.dead, Replies: ff.replies}}, nil
	case a.configPath == "":
		return nil, usagef("%s: say where to look: --config FILE, or --stream/--delayed/--dead-letter keys", cmd.CommandPath())
	}
	fc, err := a.config()
	if err != nil {
		return nil, err
	}
	mounts, err := fc.mount(ff.mount, a.configPath)
	if err != nil {
		return nil, err
	}
	var scopes []admin.FindScope
	for _, mc := range mounts {
		if mc.Kind == mountPartitioned {
			continue // its partitions are not searched
		}
		s := admin.FindScope{Mount: mc.Name, Delayed: mc.Delayed, Replies: mc.Replies}
		if mc.isStream() {
			s.Stream, s.Group, s.DeadLetter = mc.Key, mc.Group, mc.DeadLetter
		} else {
			s.List, s.DeadLetterList = mc.Key, mc.DeadLetter
		}
		scopes = append(scopes, s)
	}
	return scopes, nil
}

// foundJSON is admin.Found as --json prints it.
type foundJSON struct {
	Limited bool          `json:"limited"`
	Origins []string      `json:"origins"`
	Places  []placeJSON   `json:"places"`
	Query   string        `json:"query"`
	Scanned []scannedJSON `json:"scanned"`
}

// placeJSON is admin.Place as --json prints it.
type placeJSON struct {
	Consumer     string     `json:"consumer,omitempty"`
	Deliveries   int64      `json:"deliveries,omitempty"`
	Due          *time.Time `json:"due,omitempty"`
	Error        string     `json:"error,omitempty"`
	ID           string     `json:"id"`
	IdleMs       int64      `json:"idle_ms,omitempty"`
	Key          string     `json:"key"`
	Kind         string     `json:"kind"`
	Mount        string     `json:"mount,omitempty"`
	OriginID     string     `json:"origin_id"`
	Reason       string     `json:"reason,omitempty"`
	ReplayedFrom string     `json:"replayed_from,omitempty"`
	ReplyOf      string     `json:"reply_of,omitempty"`
	RetryCount   int        `json:"retry_count"`
	Time         *time.Time `json:"time,omitempty"`
}

// scannedJSON is admin.Scanned as --json prints it.
type scannedJSON struct {
	Complete bool   `json:"complete"`
	From     string `json:"from"`
	Key      string `json:"key"`
	Read     int    `json:"read"`
	Role     string `json:"role"`
	Through  string `json:"through"`
	Total    int64  `json:"total"`
}

func (a *app) printFound(f *admin.Found) error {
	if a.json {
		j := foundJSON{Limited: f.Limited, Origins: f.Origins, Query: f.Query.String(), Places: []placeJSON{}}
		for _, p := range f.Places {
			j.Places = append(j.Places, placeJSON{
				Consumer: p.Consumer, Deliveries: p.Deliveries, Due: timeOrNil(p.Due), Error: p.Error, ID: p.ID,
				IdleMs: ms(p.Idle), Key: p.Key, Kind: string(p.Kind), Mount: p.Mount, OriginID: p.OriginID, Reason: p.Reason,
				ReplayedFrom: p.ReplayedFrom, ReplyOf: p.ReplyOf, RetryCount: p.RetryCount, Time: timeOrNil(p.Time),
			})
		}
		for _, s := range f.Scanned {
			j.Scanned = append(j.Scanned, scannedJSON(s))
		}
		return a.printJSON(j)
	}
	fmt.Fprintf(a.stdout, "find %s: %d places of %s\n", f.Query, len(f.Places), orDash(strings.Join(f.Origins, ", ")))
	if f.Limited {
		fmt.Fprintf(a.stdout, "  more places match: the first %d are shown (--limit)\n", f.Query.Limit)
	}
	tw := a.table()
	fmt.Fprintln(tw, "KIND\tMOUNT\tKEY\tID\tRETRIES\tWHERE")
	for _, p := range f.Places {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", p.Kind, orDash(p.Mount), p.Key, p.ID, p.RetryCount, placeDetail(p, f.Now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, "\nread:")
	for _, s := range f.Scanned {
		bound := "all of it"
		if !s.Complete {
			bound = fmt.Sprintf("stopped at the bound (--scan %d): more lies past %s", f.Query.Scan, s.Through)
		}
		fmt.Fprintf(a.stdout, "  %s %s: %d of %d from %s through %s, %s\n", s.Role, s.Key, s.Read, s.Total, s.From, orDash(s.Through), bound)
	}
	return nil
}

// placeDetail says what a person needs of p: who holds it, when it is due, why it died.
func placeDetail(p admin.Place, now time.Time) string {
	var s string
	switch p.Kind {
	case admin.PlacePending:
		s = fmt.Sprintf("pending at %s, idle %s, delivered %d times", p.Consumer, dur(p.Idle), p.Deliveries)
	case admin.PlaceDelayed:
		s = fmt.Sprintf("due %s (in %s)", p.Due.UTC().Format(time.RFC3339), dur(p.Due.Sub(now)))
	case admin.PlaceDead:
		s = fmt.Sprintf("%s: %s", p.Reason, p.Error)
	case admin.PlaceReply:
		s = "reply to " + p.ReplyOf
	default:
		s = "added " + p.Time.UTC().Format(time.RFC3339)
	}
	if p.ReplayedFrom != "" {
		s += ", replayed from " + p.ReplayedFrom
	}
	return s
}
