package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/settlekit/settle/inbox"
)

// inboxCLI is the state the inbox commands share: the flags that name the database and
// the table, and the connection once open.
type inboxCLI struct {
	a   *app
	cfg inboxConfig
	db  *sql.DB
	ib  *inbox.Inbox
	sf  sqlFlags
}

func (a *app) inboxCommand() *cobra.Command {
	ic := &inboxCLI{a: a}
	dead := group("dead", "Dead rows of an inbox: list, show, replay, purge",
		ic.deadLsCommand(), ic.deadShowCommand(), ic.deadReplayCommand(), ic.deadPurgeCommand())
	c := group("inbox", "SQL table inboxes: views of their groups, their dead rows",
		ic.viewCommand(), ic.statsCommand(), ic.pauseCommand("pause"), ic.pauseCommand("resume"), dead)
	c.Long = `The inbox commands read and act on a SQL table inbox (package inbox) through its
operator API: the view of a group, the dead rows of a dead letter (a dead-letter group
of the table, or a dead-letter table), their replay and purge.

The database: --dsn DSN, else $` + EnvDSN + `, else the "dsn" of --config. postgres:// or
postgresql:// is PostgreSQL; file:… or a path ending .db, .sqlite or .sqlite3 SQLite (the
file must exist); anything else a MySQL/MariaDB DSN (user:pass@tcp(host:port)/db).

The table: --config FILE (JSON: {"dsn": …, "inboxes": [{"name", "table": {"name", "id",
"group", "attempt", "retry_after", "locked_until", "payload", "last_error", "dead_at"},
"groups": […], "dead": […]}]}) and/or the table flags, which override it. Columns not
named are not used (id, locked_until and payload default to those names). A table or a
column named that the database lacks is refused, naming it.`
	c.Example = `  settle inbox --dsn postgres://app@db/app --table mail_jobs --group name --attempt attempt \
      --retry-after retry_after dead ls emails.dead
  settle inbox --config settle.json dead replay emails.dead --to emails --rate 50`
	ic.sf.add(c)
	return c
}

// open connects to the database and returns the inbox the flags name (once); the
// caller's command closes it when it returns (see closeDB).
func (ic *inboxCLI) open(ctx context.Context) (*inbox.Inbox, error) {
	if ic.ib != nil {
		return ic.ib, nil
	}
	fc, err := ic.a.config()
	if err != nil {
		return nil, err
	}
	cfg, dsn, from, err := ic.sf.spec(fc, ic.a.configPath)
	if err != nil {
		return nil, err
	}
	db, d, err := openSQL(ctx, dsn, from)
	if err != nil {
		return nil, err
	}
	ic.cfg, ic.db, ic.ib = cfg, db, inbox.New(db, d, cfg.Table.inboxTable())
	return ic.ib, nil
}

func (ic *inboxCLI) closeDB() {
	if ic.db != nil {
		_ = ic.db.Close()
	}
}

// withInbox is the RunE of an inbox command: it opens the inbox, runs fn, and closes it.
func (ic *inboxCLI) withInbox(fn func(ctx context.Context, ib *inbox.Inbox, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		defer ic.closeDB()
		ib, err := ic.open(cmd.Context())
		if err != nil {
			return err
		}
		return fn(cmd.Context(), ib, args)
	}
}

// withDead is the RunE of a command on the dead letter DEAD (its first argument) that
// the filter flags ff select from: a filter that does not parse is refused before the
// database is opened.
func (ic *inboxCLI) withDead(ff *rowFilterFlags, fn func(ctx context.Context, ib *inbox.Inbox, dead string, f inbox.Filter) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		f, err := ff.filter(time.Now())
		if err != nil {
			return err
		}
		return ic.withInbox(func(ctx context.Context, ib *inbox.Inbox, args []string) error {
			return fn(ctx, ib, args[0], f)
		})(cmd, args)
	}
}

// groupViewJSON is inbox.GroupView as --json prints it, with whether the group is
// paused; a line of inbox stats about a dead letter has Kind "dead-letter" and its count
// only (no paused). Inbox names the inbox of the config file in settle stats.
type groupViewJSON struct {
	Dead        *int64 `json:"dead,omitempty"`
	DeadLetter  string `json:"dead_letter,omitempty"`
	Due         int64  `json:"due"`
	Group       string `json:"group"`
	Inbox       string `json:"inbox,omitempty"`
	Kind        string `json:"kind"`
	LeasePassed int64  `json:"lease_passed"`
	Leased      int64  `json:"leased"`
	OldestDueMs int64  `json:"oldest_due_ms"`
	Paused      *bool  `json:"paused,omitempty"`
	Table       string `json:"table"`
	Waiting     int64  `json:"waiting"`
}

// groupView reads the group g of ib (and the count of the dead letter dead, "" for
// none) and whether g is paused: (*inbox.Inbox).Paused, one more SELECT. A table
// without a group column is never paused.
func groupView(ctx context.Context, ib *inbox.Inbox, g, dead string) (groupViewJSON, error) {
	v, err := ib.View(ctx, g, dead)
	if err != nil {
		return groupViewJSON{}, err
	}
	paused := false
	if ib.Table().Group != "" {
		if paused, err = ib.Paused(ctx, g); err != nil {
			return groupViewJSON{}, err
		}
	}
	j := groupViewJSONOf(ib.Table().Name, dead, v)
	j.Paused = &paused
	return j, nil
}

func groupViewJSONOf(table, dead string, v *inbox.GroupView) groupViewJSON {
	out := groupViewJSON{DeadLetter: dead, Due: v.Due, Group: v.Group, Kind: kindGroup, LeasePassed: v.LeasePassed, Leased: v.Leased,
		OldestDueMs: ms(v.OldestDue), Table: table, Waiting: v.Waiting}
	if dead != "" {
		n := v.Dead
		out.Dead = &n
	}
	return out
}

// The kinds of the lines of inbox view and inbox stats.
const (
	kindDeadLetter = "dead-letter"
	kindGroup      = "group"
)

func (ic *inboxCLI) viewCommand() *cobra.Command {
	var dead string
	c := &cobra.Command{
		Use:   "view [GROUP]",
		Short: "What a group of the inbox holds: due, leased, lease passed, waiting, dead",
		Long: `Show what the group GROUP of the inbox table holds, read in one statement: the rows
due, leased (in flight), whose lease passed (their worker never settled them), waiting
(parked by a RetryAfter), how long the oldest due row has been due, and whether the group
is paused ((*inbox.Inbox).Pause: its mounts read nothing new); with --dead, how
many rows the dead letter DEAD holds (a group of the table, or a dead-letter table).
GROUP is omitted for a table without a group column.`,
		Example: `  settle inbox --config settle.json view emails --dead emails.dead`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s takes at most one argument (GROUP), got %d", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: ic.withInbox(func(ctx context.Context, ib *inbox.Inbox, args []string) error {
			g := ""
			if len(args) == 1 {
				g = args[0]
			}
			if g == "" && ib.Table().Group != "" {
				return usagef("name the GROUP to view: table %s has a group column (%s)", ib.Table().Name, ib.Table().Group)
			}
			v, err := groupView(ctx, ib, g, dead)
			if err != nil {
				return err
			}
			return ic.a.printViews([]groupViewJSON{v})
		}),
	}
	c.Flags().StringVar(&dead, "dead", "", "also count the rows of this dead letter `DEAD` (a group, or a dead-letter table)")
	return c
}

// inboxStats reads the groups of ib (their views, paused or not) and the counts of its
// dead letters dl: the lines of inbox stats.
func inboxStats(ctx context.Context, ib *inbox.Inbox, groups, dl []string) ([]groupViewJSON, error) {
	var vs []groupViewJSON
	for _, g := range groups {
		v, err := groupView(ctx, ib, g, "")
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	for _, d := range dl {
		v, err := ib.View(ctx, "", d)
		if err != nil {
			return nil, err
		}
		n := v.Dead
		vs = append(vs, groupViewJSON{Dead: &n, DeadLetter: d, Kind: kindDeadLetter, Table: ib.Table().Name})
	}
	return vs, nil
}

func (a *app) printViews(vs []groupViewJSON) error {
	if a.json {
		for _, v := range vs {
			if err := a.printJSON(v); err != nil {
				return err
			}
		}
		return nil
	}
	w := a.table()
	fmt.Fprintln(w, "TABLE\tGROUP\tDUE\tLEASED\tLEASE PASSED\tWAITING\tOLDEST DUE\tPAUSED\tDEAD")
	for _, v := range vs {
		if v.Kind == kindDeadLetter {
			fmt.Fprintf(w, "%s\t%s (dead letter)\t-\t-\t-\t-\t-\t-\t%d\n", v.Table, v.DeadLetter, *v.Dead)
			continue
		}
		dead := "-"
		if v.Dead != nil {
			dead = fmt.Sprintf("%d (%s)", *v.Dead, v.DeadLetter)
		}
		paused := "no"
		if v.Paused != nil && *v.Paused {
			paused = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", v.Table, orDash(v.Group), v.Due, v.Leased, v.LeasePassed, v.Waiting,
			dur(time.Duration(v.OldestDueMs)*time.Millisecond), paused, dead)
	}
	return w.Flush()
}

func (ic *inboxCLI) statsCommand() *cobra.Command {
	var deads []string
	c := &cobra.Command{
		Use:   "stats [GROUP...]",
		Short: "One screen of counts: each group of the inbox and each dead letter",
		Long: `Show one line per group (due, leased, lease passed, waiting, oldest due) and per dead
letter (its count): the groups given, else those of the inbox in --config (a table
without a group column is one queue); the dead letters of --dead, else those of
--config.`,
		Example: `  settle inbox --config settle.json stats
  settle inbox --dsn "$DSN" --table mail_jobs --group name stats emails --dead emails.dead`,
		RunE: ic.withInbox(func(ctx context.Context, ib *inbox.Inbox, args []string) error {
			groups, dl := args, deads
			if len(groups) == 0 {
				groups = ic.cfg.Groups
			}
			if len(dl) == 0 {
				dl = ic.cfg.Dead
			}
			t := ib.Table()
			if len(groups) == 0 && t.Group == "" {
				groups = []string{""}
			}
			if len(groups) == 0 && len(dl) == 0 {
				return usagef("name the groups (arguments) or the dead letters (--dead), or give them in --config")
			}
			var vs []groupViewJSON
			vs, err := inboxStats(ctx, ib, groups, dl)
			if err != nil {
				return err
			}
			return ic.a.printViews(vs)
		}),
	}
	c.Flags().StringArrayVar(&deads, "dead", nil, "count this dead letter `DEAD` (repeatable)")
	return c
}

// pauseCommand is inbox pause GROUP (verb "pause") or inbox resume GROUP ("resume"):
// (*inbox.Inbox).Pause and Resume, as the console's buttons.
func (ic *inboxCLI) pauseCommand(verb string) *cobra.Command {
	short := "Pause the mounts reading GROUP: they read nothing new until resumed (any process)"
	done := "paused"
	if verb == "resume" {
		short, done = "Resume the mounts reading GROUP: they read again within a second", "resumed"
	}
	return &cobra.Command{
		Use:     verb + " GROUP",
		Short:   short,
		Example: "  settle inbox --config settle.json " + verb + " emails",
		Args:    exactArgs("GROUP"),
		RunE: ic.withInbox(func(ctx context.Context, ib *inbox.Inbox, args []string) error {
			act := ib.Pause
			if verb == "resume" {
				act = ib.Resume
			}
			if err := act(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(ic.a.stdout, "%s group %s of %s: its mounts see it within a second\n", done, args[0], ib.Table().Name)
			return nil
		}),
	}
}
