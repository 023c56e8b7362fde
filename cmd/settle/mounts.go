package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
)

// mountStatJSON is one mount of the config file as stats --json prints it: its stream
// and group (a stream kind), its partitions and live members (a partitioned stream) or
// its list (a list kind), whether it is paused, its delay set and its dead letter when
// the file names them.
type mountStatJSON struct {
	DeadLetter  string           `json:"dead_letter,omitempty"`
	DeadLetters *summaryJSON     `json:"dead_letters,omitempty"`
	DelaySet    *delaySetJSON    `json:"delay_set,omitempty"`
	Delayed     string           `json:"delayed,omitempty"`
	Error       string           `json:"error,omitempty"`
	Group       string           `json:"group,omitempty"`
	Key         string           `json:"key"`
	Kind        string           `json:"kind"`
	Limits      []limitJSON      `json:"limits,omitempty"`
	List        *listJSON        `json:"list,omitempty"`
	Mount       string           `json:"mount"`
	MountKind   string           `json:"mount_kind"`
	Partitioned *partitionedJSON `json:"partitioned,omitempty"`
	Paused      bool             `json:"paused"`
	Stream      *streamJSON      `json:"stream,omitempty"`
}

// limitJSON is one flow limit of a mount as stats --json prints it (admin.LimitState):
// for a rate limit, its rate a second and in_use its starts given ahead of now; for a
// concurrency limit, in_use its slots held; waiting, the deliveries waiting for it as the
// consuming processes last reported; for a per-key limit, the key values holding
// state (keys), those at their limit (keys_at_limit) and up to 20 of them (at_limit_values),
// partial when the bounded scan stopped before it had seen every key.
type limitJSON struct {
	AtLimit       bool             `json:"at_limit"`
	AtLimitValues []limitValueJSON `json:"at_limit_values,omitempty"`
	InUse         int              `json:"in_use"`
	Keys          int              `json:"keys,omitempty"`
	KeysAtLimit   int              `json:"keys_at_limit,omitempty"`
	Limit         string           `json:"limit"`
	N             int              `json:"n"`
	Partial       bool             `json:"partial,omitempty"`
	Rate          float64          `json:"rate,omitempty"`
	Waiting       int              `json:"waiting"`
}

// limitValueJSON is a key value at its limit (admin.LimitValue).
type limitValueJSON struct {
	InUse int    `json:"in_use"`
	Value string `json:"value"`
}

// limitJSONOf is s as stats prints it.
func limitJSONOf(s admin.LimitState) limitJSON {
	vs := make([]limitValueJSON, len(s.AtLimitValues))
	for k, v := range s.AtLimitValues {
		vs[k] = limitValueJSON{InUse: v.InUse, Value: v.Value}
	}
	return limitJSON{AtLimit: s.AtLimit, AtLimitValues: vs, InUse: s.InUse, Keys: s.Keys, KeysAtLimit: s.KeysAtLimit,
		Limit: s.Limit.String(), N: s.Limit.N, Partial: s.Partial, Rate: s.Rate, Waiting: s.Waiting}
}

// limitDetails says what a limit's state means, for the stats table.
func limitDetails(l limitJSON) string {
	var b strings.Builder
	if l.Rate > 0 {
		fmt.Fprintf(&b, "rate %g/s, %d starts given ahead of now", l.Rate, l.InUse)
	} else {
		fmt.Fprintf(&b, "%d slots in use", l.InUse)
	}
	fmt.Fprintf(&b, ", %d waiting", l.Waiting)
	if l.Keys > 0 || l.KeysAtLimit > 0 {
		fmt.Fprintf(&b, ", %d keys, %d at their limit", l.Keys, l.KeysAtLimit)
		for k, v := range l.AtLimitValues {
			sep := ": "
			if k > 0 {
				sep = ", "
			}
			fmt.Fprintf(&b, "%s%s (%d)", sep, v.Value, v.InUse)
		}
		if len(l.AtLimitValues) < l.KeysAtLimit {
			b.WriteString(", …")
		}
		if l.Partial {
			b.WriteString(" (a bounded scan: more keys may hold state)")
		}
	} else if l.AtLimit {
		b.WriteString(", at its limit")
	}
	return b.String()
}

// kindMount is the Kind of a stats line about a mount of the config file.
const kindMount = "mount"

// statMount reads the keys of the mount mc. A missing list is an empty one (Redis
// deletes an emptied list), a missing delay set an empty set and a missing dead letter
// one that holds none; a missing stream or group is an error naming the mount.
func (a *app) statMount(ctx context.Context, mc mountConfig, reclaim time.Duration) (mountStatJSON, error) {
	m := mountStatJSON{DeadLetter: mc.DeadLetter, Delayed: mc.Delayed, Group: mc.Group, Key: mc.Key, Kind: kindMount, Mount: mc.Name, MountKind: mc.Kind}
	wrap := func(err error) error { return fmt.Errorf("mount %q: %w", mc.Name, err) }
	if mc.Kind == mountPartitioned {
		info, err := a.insp.PartitionedStream(ctx, mc.Key, mc.Group, admin.PartitionDeadLetter(mc.DeadLetter))
		if err != nil {
			return m, wrap(err)
		}
		if m.Paused, err = a.insp.Paused(ctx, mc.Key, mc.Group); err != nil {
			return m, wrap(err)
		}
		j := partitionedJSONOf(info, mc.DeadLetter)
		m.Partitioned = &j
		return m, nil // its delay sets and dead letters are per partition, counted there
	}
	if mc.isStream() {
		s, err := a.insp.Stream(ctx, mc.Key, mc.Group, admin.ReclaimIdle(reclaim))
		if err != nil {
			return m, wrap(err)
		}
		j := streamJSONOf(s)
		m.Stream, m.Paused = &j, s.Paused
	} else {
		l, err := a.insp.ReliableList(ctx, mc.Key)
		switch {
		case errors.Is(err, admin.ErrKeyNotFound):
			l = &admin.ReliableListInfo{Key: mc.Key}
		case err != nil:
			return m, wrap(err)
		}
		if m.Paused, err = a.insp.Paused(ctx, mc.Key, ""); err != nil {
			return m, wrap(err)
		}
		j := listJSONOf(l, m.Paused)
		m.List = &j
	}
	if limits, _ := mc.flowLimits(); len(limits) > 0 { // checked by loadConfig
		ls, err := a.insp.Limits(ctx, mc.Key, mc.Group, limits, admin.LimitsOptions{})
		if err != nil {
			return m, wrap(err)
		}
		for _, l := range ls {
			m.Limits = append(m.Limits, limitJSONOf(l))
		}
	}
	if mc.Delayed != "" {
		d, err := a.insp.DelaySet(ctx, mc.Delayed)
		if err != nil {
			return m, wrap(err)
		}
		j := delaySetJSONOf(d)
		m.DelaySet = &j
	}
	if mc.DeadLetter != "" {
		st := a.insp.ListDeadLetterStore(mc.DeadLetter)
		if mc.isStream() {
			st = a.insp.StreamDeadLetters(mc.DeadLetter)
		}
		s, err := st.Summary(ctx, admin.Filter{}, admin.DefaultSample)
		switch {
		case errors.Is(err, admin.ErrKeyNotFound):
			s = &admin.DeadLetterSummary{Key: mc.DeadLetter}
		case err != nil:
			return m, wrap(err)
		}
		j := summaryJSONOf(s)
		m.DeadLetters = &j
	}
	return m, nil
}

// printPartitioned writes the stats lines of the partitioned stream p (of the mount
// named mount, "" for a key): one for its group, one per partition (its owner, lease
// and backlog), one per live member (the partitions it holds).
func printPartitioned(w io.Writer, mount string, p *partitionedJSON, paused bool) {
	var length int64
	owned := 0
	for _, pt := range p.Partitions {
		length += pt.Length
		if pt.Owner != "" {
			owned++
		}
	}
	details := fmt.Sprintf("group %s: %d partitions, %d held, %d live members", p.Group, len(p.Partitions), owned, len(p.Members))
	if p.Group == "" {
		details = fmt.Sprintf("%d partitions; no --group given: no owner, lag or member read", len(p.Partitions))
	}
	if paused {
		details += "; paused"
	}
	lead := ""
	if mount != "" {
		lead = mount + "\t"
	}
	fmt.Fprintf(w, "%s%s\tpartitioned stream\t%d\t%s\n", lead, p.Name, length, details)
	for _, pt := range p.Partitions {
		fmt.Fprintf(w, "%s%s\tpartition %d\t%d\t%s\n", lead, pt.Key, pt.Index, pt.Length, partitionDetails(pt, p.DeadLetter != ""))
	}
	for _, mb := range p.Members {
		fmt.Fprintf(w, "%s%s\tmember\t%d\tholds %d partitions, heartbeat left %s\n", lead, mb.Member, mb.Owns, mb.Owns, dur(time.Duration(mb.TTLMS)*time.Millisecond))
	}
}

// statConfig is stats with --config and no keys: every mount of the file (or the one
// --mount names) and, without --mount, every inbox group and dead letter of the file.
// It connects to Redis only for mounts and to the database only for inboxes.
func (a *app) statConfig(ctx context.Context, mount, dsnFlag string, reclaim time.Duration) error {
	fc, err := a.config()
	if err != nil {
		return err
	}
	mounts, err := fc.mount(mount, a.configPath)
	if err != nil {
		return err
	}
	var inboxes []inboxConfig
	if mount == "" {
		inboxes = fc.Inboxes
	}
	if len(mounts) == 0 && len(inboxes) == 0 {
		return fmt.Errorf("--config %s names no mounts and no inboxes: give the keys as arguments, or name them in the file", a.configPath)
	}
	var ms []mountStatJSON
	var unreadable []string
	if len(mounts) > 0 {
		if err := a.connect(ctx); err != nil {
			return err
		}
		for _, mc := range mounts {
			m, err := a.statMount(ctx, mc, reclaim)
			if err != nil {
				// Shown as unreadable with why; the others are still shown.
				m = mountStatJSON{Error: scrub(err.Error()), Group: mc.Group, Key: mc.Key, Kind: kindMount, Mount: mc.Name, MountKind: mc.Kind}
				unreadable = append(unreadable, mc.Name)
			}
			ms = append(ms, m)
		}
	}
	var vs []groupViewJSON
	if len(inboxes) > 0 {
		if vs, err = a.statInboxes(ctx, fc, inboxes, dsnFlag); err != nil {
			return err
		}
	}
	if err := a.printConfigStats(ms, vs); err != nil {
		return err
	}
	if len(unreadable) > 0 {
		return fmt.Errorf("%d of the %d mounts could not be read: %s (marked UNREADABLE above)", len(unreadable), len(mounts), strings.Join(unreadable, ", "))
	}
	return nil
}

// statInboxes reads each group and dead letter of the inboxes (the DSN by the rule of
// resolveDSN), each line naming its inbox.
func (a *app) statInboxes(ctx context.Context, fc *fileConfig, inboxes []inboxConfig, dsnFlag string) ([]groupViewJSON, error) {
	dsn, from, err := resolveDSN(dsnFlag, fc, a.configPath)
	if err != nil {
		return nil, err
	}
	db, d, err := openSQL(ctx, dsn, from)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []groupViewJSON
	for _, ic := range inboxes {
		name := ic.Name
		if name == "" {
			name = ic.Table.Name
		}
		t := ic.Table.withDefaults()
		ib := inbox.New(db, d, t.inboxTable())
		groups := ic.Groups
		if len(groups) == 0 && t.Group == "" {
			groups = []string{""}
		}
		vs, err := inboxStats(ctx, ib, groups, ic.Dead)
		if err != nil {
			return nil, fmt.Errorf("inbox %q: %w", name, err)
		}
		for k := range vs {
			vs[k].Inbox = name
		}
		out = append(out, vs...)
	}
	return out, nil
}

func (a *app) printConfigStats(ms []mountStatJSON, vs []groupViewJSON) error {
	if a.json {
		for _, m := range ms {
			if err := a.printJSON(m); err != nil {
				return err
			}
		}
		return a.printViews(vs)
	}
	if len(ms) > 0 {
		w := a.table()
		fmt.Fprintln(w, "MOUNT\tKEY\tKIND\tCOUNT\tDETAILS")
		for _, m := range ms {
			if m.Error != "" {
				fmt.Fprintf(w, "%s\t%s\t%s\t-\tUNREADABLE: %s\n", m.Mount, m.Key, m.MountKind, m.Error)
			}
			if s := m.Stream; s != nil {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.Mount, m.Key, m.MountKind, s.Length, streamDetails(s))
			}
			if l := m.List; l != nil {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.Mount, m.Key, m.MountKind, l.Length, listDetails(l))
			}
			if p := m.Partitioned; p != nil {
				printPartitioned(w, m.Mount, p, m.Paused)
			}
			for _, l := range m.Limits {
				fmt.Fprintf(w, "%s\t%s\tlimit\t%d\t%s\n", m.Mount, l.Limit, l.InUse, limitDetails(l))
			}
			if d := m.DelaySet; d != nil {
				fmt.Fprintf(w, "%s\t%s\tdelay set\t%d\t%s\n", m.Mount, d.Key, d.Size, delayDetails(d))
			}
			if d := m.DeadLetters; d != nil {
				fmt.Fprintf(w, "%s\t%s\tdead letters\t%d\t%s\n", m.Mount, d.Key, d.Count, deadDetails(d))
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(vs) == 0 {
		return nil
	}
	if len(ms) > 0 {
		fmt.Fprintln(a.stdout)
	}
	return a.printViews(vs)
}
