package settleotel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/inbox"
)

// Gauges names what RegisterGauges reads at each collection: the state of the mounts'
// keys and tables, through settle/admin's Inspector and the inbox's View (the same
// figures the settle command and the console show).
type Gauges struct {
	// Inspector reads the Redis sources; required when Streams or Lists are given.
	Inspector *admin.Inspector
	// Streams are stream mounts (Stream, ClaimingStream) to read.
	Streams []StreamGauge
	// Lists are list mounts (List, ReliableList) to read.
	Lists []ListGauge
	// Inboxes are inbox mounts to read.
	Inboxes []InboxGauge
}

// StreamGauge is one stream mount: settle_backlog and settle_consumer_group_lag (the
// group's lag), settle_pending and settle_pending_oldest_idle_seconds, and, when named,
// its delay set's settle_delayed and settle_delayed_overdue and its dead-letter stream's
// settle_dead_letters; with Limits (the mount's flow limits, as its App declares them,
// in order), settle_flow_waiting, settle_flow_in_use and settle_flow_keys_at_limit of
// each, labelled settle_limit (its name: rate, rateby, slots, …; never a key value).
type StreamGauge struct {
	DeadLetter string
	DelaySet   string
	Group      string
	Key        string
	Limits     []admin.FlowLimit
	Mount      string
}

// ListGauge is one list mount: settle_backlog (the list's length), for a reliable list
// settle_pending (what its consumers' processing lists hold), and its delay set's and
// dead-letter list's gauges when named, and a reliable list's flow limits' (see
// StreamGauge).
type ListGauge struct {
	DeadLetter string
	DelaySet   string
	Key        string
	Limits     []admin.FlowLimit
	Mount      string
	Reliable   bool
}

// InboxGauge is one inbox queue: settle_backlog (rows due), settle_delayed (rows
// waiting for their retry_after), settle_leased, settle_expired_leases, and
// settle_dead_letters of Dead when named.
type InboxGauge struct {
	Dead  string
	Group string
	Inbox *inbox.Inbox
	Mount string
}

// gauges are the observable instruments RegisterGauges reports.
type gauges struct {
	backlog, lag, pending, delayed, overdue, dead, leased, expired metric.Int64ObservableGauge
	flowWaiting, flowInUse, flowKeysAtLimit                        metric.Int64ObservableGauge
	oldestIdle                                                     metric.Float64ObservableGauge
}

// RegisterGauges registers the gauges of g, read at every collection (each a few round
// trips: a scrape every 15 s or so is what they are made for). A read that fails leaves
// its series out of that collection and is returned to the SDK, which reports it. The
// returned Registration's Unregister stops them.
func (o *Observer) RegisterGauges(g Gauges) (metric.Registration, error) {
	if (len(g.Streams) > 0 || len(g.Lists) > 0) && g.Inspector == nil {
		return nil, errors.New("settleotel: Gauges.Inspector is required to read streams and lists")
	}
	var gs gauges
	var err error
	for _, i := range []struct {
		dst        *metric.Int64ObservableGauge
		name, desc string
	}{
		{&gs.backlog, "settle.backlog", "Messages waiting to be read: a stream group's lag, a list's length, an inbox's due rows."},
		{&gs.lag, "settle.consumer_group.lag", "Entries a stream's consumer group has still to read."},
		{&gs.pending, "settle.pending", "Messages delivered and not settled: a stream group's pending entries, a reliable list's processing lists."},
		{&gs.delayed, "settle.delayed", "Messages waiting for a delay: a durable delay set's members, an inbox's rows waiting for retry_after."},
		{&gs.overdue, "settle.delayed.overdue", "Delay set members due and not swept back yet: a count that stays up means no consumer reads."},
		{&gs.dead, "settle.dead_letters", "Messages in the mount's dead-letter destination (settle.dead_letter.destination)."},
		{&gs.leased, "settle.leased", "Inbox rows leased to a worker, the lease not passed."},
		{&gs.expired, "settle.expired_leases", "Inbox rows whose lease passed unsettled: their worker crashed or hung."},
		{&gs.flowWaiting, "settle.flow.waiting", "Deliveries waiting for a flow limit (settle.limit), over every process consuming the mount, as each last reported (every second while some wait)."},
		{&gs.flowInUse, "settle.flow.in_use", "A flow limit's use (settle.limit): a concurrency limit's slots held (over all key values), a rate limit's starts given ahead of now."},
		{&gs.flowKeysAtLimit, "settle.flow.keys_at_limit", "Key values of a per-key flow limit (settle.limit) at their limit, found by a bounded scan."},
	} {
		var e error
		*i.dst, e = o.meter.Int64ObservableGauge(i.name, metric.WithUnit("{message}"), metric.WithDescription(i.desc))
		err = errors.Join(err, e)
	}
	var e error
	gs.oldestIdle, e = o.meter.Float64ObservableGauge("settle.pending.oldest_idle", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest pending stream entry has gone undelivered, unclaimed and untouched by a heartbeat."))
	if err = errors.Join(err, e); err != nil {
		return nil, err
	}
	return o.meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		return g.observe(ctx, obs, o, gs)
	}, gs.backlog, gs.lag, gs.pending, gs.delayed, gs.overdue, gs.dead, gs.leased, gs.expired, gs.oldestIdle,
		gs.flowWaiting, gs.flowInUse, gs.flowKeysAtLimit)
}

// observe reads every source of g and reports what it read.
func (g Gauges) observe(ctx context.Context, obs metric.Observer, o *Observer, gs gauges) error {
	var errs []error
	for _, s := range g.Streams {
		sr := o.seriesOf(s.Mount, "stream", s.Key, s.Group)
		at := sr.base
		info, err := g.Inspector.Stream(ctx, s.Key, s.Group)
		if err != nil {
			errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", s.Mount, err))
		} else {
			if info.Lag >= 0 {
				obs.ObserveInt64(gs.backlog, info.Lag, at)
				obs.ObserveInt64(gs.lag, info.Lag, at)
			}
			obs.ObserveInt64(gs.pending, info.Pending, at)
			obs.ObserveFloat64(gs.oldestIdle, info.OldestPendingIdle.Seconds(), at)
		}
		errs = append(errs, g.delayAndDead(ctx, obs, gs, sr, s.DelaySet, s.DeadLetter)...)
		errs = append(errs, g.limits(ctx, obs, gs, sr, s.Key, s.Group, s.Limits)...)
	}
	for _, l := range g.Lists {
		sr := o.seriesOf(l.Mount, "list", l.Key, "")
		at := sr.base
		if l.Reliable {
			info, err := g.Inspector.ReliableList(ctx, l.Key)
			if errors.Is(err, admin.ErrKeyNotFound) {
				info, err = &admin.ReliableListInfo{}, nil // no item and no consumer: nothing waits
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", l.Mount, err))
			} else {
				obs.ObserveInt64(gs.backlog, info.Length, at)
				obs.ObserveInt64(gs.pending, info.Processing, at)
			}
		} else if n, err := g.Inspector.Length(ctx, l.Key); err != nil {
			errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", l.Mount, err))
		} else {
			obs.ObserveInt64(gs.backlog, n, at)
		}
		errs = append(errs, g.delayAndDead(ctx, obs, gs, sr, l.DelaySet, l.DeadLetter)...)
		errs = append(errs, g.limits(ctx, obs, gs, sr, l.Key, "", l.Limits)...)
	}
	for _, q := range g.Inboxes {
		sr := o.seriesOf(q.Mount, transportTable, q.Inbox.Table().Name, q.Group)
		at := sr.base
		v, err := q.Inbox.View(ctx, q.Group, q.Dead)
		if err != nil {
			errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", q.Mount, err))
			continue
		}
		obs.ObserveInt64(gs.backlog, v.Due, at)
		obs.ObserveInt64(gs.delayed, v.Waiting, at)
		obs.ObserveInt64(gs.leased, v.Leased, at)
		obs.ObserveInt64(gs.expired, v.LeasePassed, at)
		if q.Dead != "" {
			obs.ObserveInt64(gs.dead, v.Dead, sr.deadLetters(q.Dead))
		}
	}
	return errors.Join(errs...)
}

// delayAndDead reports a Redis mount's delay set and dead-letter destination, when named.
func (g Gauges) delayAndDead(ctx context.Context, obs metric.Observer, gs gauges, sr *series, delaySet, deadLetter string) []error {
	var errs []error
	at, mount := sr.base, sr.key.mount
	if delaySet != "" {
		if info, err := g.Inspector.DelaySet(ctx, delaySet); err != nil {
			errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", mount, err))
		} else {
			obs.ObserveInt64(gs.delayed, info.Size, at)
			obs.ObserveInt64(gs.overdue, info.Overdue, at)
		}
	}
	if deadLetter != "" {
		if n, err := g.Inspector.Length(ctx, deadLetter); err != nil {
			errs = append(errs, fmt.Errorf("settleotel: mount %s: %w", mount, err))
		} else {
			obs.ObserveInt64(gs.dead, n, sr.deadLetters(deadLetter))
		}
	}
	return errs
}

// limits reports a Redis mount's flow limits, when it declares some, each labelled by
// its name (never a key value).
func (g Gauges) limits(ctx context.Context, obs metric.Observer, gs gauges, sr *series, key, group string, limits []admin.FlowLimit) []error {
	if len(limits) == 0 {
		return nil
	}
	states, err := g.Inspector.Limits(ctx, key, group, limits, admin.LimitsOptions{Keys: 1})
	if err != nil {
		return []error{fmt.Errorf("settleotel: mount %s: %w", sr.key.mount, err)}
	}
	for _, st := range states {
		at := metric.WithAttributeSet(attribute.NewSet(with(sr.attrs, AttrLimit.String(st.Name))...))
		obs.ObserveInt64(gs.flowWaiting, int64(st.Waiting), at)
		obs.ObserveInt64(gs.flowInUse, int64(st.InUse), at)
		if st.Limit.Kind == admin.LimitRateBy || st.Limit.Kind == admin.LimitConcurrencyBy {
			obs.ObserveInt64(gs.flowKeysAtLimit, int64(st.KeysAtLimit), at)
		}
	}
	return nil
}

// deadLetters returns the attributes of settle.dead_letters for the mount's dead-letter
// destination dest: the series' and settle.dead_letter.destination.
func (s *series) deadLetters(dest string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(with(s.attrs, AttrDeadLetter.String(dest))...))
}
