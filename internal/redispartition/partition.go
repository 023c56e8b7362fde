// Package redispartition is settle's partitioned stream transport: one logical stream
// that is N Redis streams, each in a hash slot of its own (keys.Partition), read by one
// consumer group. Each partition is read, retried, delayed and dead-lettered by a
// redisstream consumer of its own, with its delay set and dead letters in its slot; this
// package routes deliveries and settlements to them and checks the layout. It is not for
// users: settle.PartitionedStream makes it through New.
package redispartition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/redisstream"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// MaxPartitions bounds Partitions: every member reads and leases each partition it owns.
const MaxPartitions = 1024

// Config is what a PartitionedStream mount was given.
type Config struct {
	// Stream is each partition's stream consumer's config; its Key is ignored (each
	// partition's is keys.Partition(Name, i)).
	Stream redisstream.Config
	// Name is the partitioned stream's name (its meta key; see keys.Partition).
	Name string
	// LeaseTTL is how long a member's lease on a partition lasts unless renewed (0:
	// DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Partitions is how many partitions the stream has.
	Partitions int
}

// transport is one mount's consumer of a partitioned stream.
type transport struct {
	cfg   Config
	env   source.Env
	owner *owner // set by Open
	parts []*partition
	index map[string]int // partition stream key -> partition index

	mu   sync.Mutex
	next int // the partition the next Fetch starts its pass at
}

// partition is one partition as the mount reads it.
type partition struct {
	i        int
	key      string
	leaseKey string
	t        source.Transport // its redisstream consumer

	lease lease // under transport.mu
}

// New returns the transport of one PartitionedStream mount.
func New(env source.Env, c Config) source.Transport {
	if c.Stream.Consumer == "" {
		c.Stream.Consumer = redisbase.DefaultConsumerName() // one name for every partition
	}
	t := &transport{cfg: c, env: env, index: map[string]int{}}
	n := min(max(c.Partitions, 0), MaxPartitions)
	for i := range n {
		sc := c.Stream
		sc.Key = keys.Partition(c.Name, i)
		penv := env
		penv.Policy = t.partitionPolicy(i, env.Policy)
		t.parts = append(t.parts, &partition{i: i, key: sc.Key, leaseKey: keys.PartitionLease(c.Name, i, c.Stream.Group), t: redisstream.New(penv, sc)})
		t.index[sc.Key] = i
	}
	return t
}

// partitionPolicy is policy with its keys placed in partition i's slot: the delay set,
// the dead-letter and reply streams (see keys.InPartition).
func (t *transport) partitionPolicy(i int, p source.Policy) source.Policy {
	in := func(k string) string {
		if k == "" {
			return ""
		}
		return keys.InPartition(t.cfg.Name, i, k)
	}
	p.DeadLetter, p.ReplyTo = in(p.DeadLetter), in(p.ReplyTo)
	if dz, ok := p.Delay.(delayed.DurableZset); ok && dz.Key != "" {
		dz.Key = in(dz.Key)
		p.Delay = dz
	}
	return p
}

func (t *transport) Info() source.Info {
	info := source.Info{Batch: t.cfg.Stream.Batch, Block: t.cfg.Stream.Block, Kind: source.KindStream}
	if len(t.parts) > 0 {
		info = t.parts[0].t.Info()
	}
	info.Key, info.Group = t.cfg.Name, t.cfg.Stream.Group
	info.Pool.Held = 1 // one blocking read at a time, whichever partition
	return info
}

func (t *transport) Validate(p source.Policy) []error {
	var errs []error
	if err := keys.CheckPartitionName(t.cfg.Name); err != nil {
		errs = append(errs, err)
	}
	if t.cfg.Partitions < 1 || t.cfg.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("Partitions(%d): must be from 1 to %d", t.cfg.Partitions, MaxPartitions))
	}
	if t.cfg.LeaseTTL < 0 || t.cfg.LeaseTTL > 0 && t.cfg.LeaseTTL < 30*time.Millisecond {
		errs = append(errs, fmt.Errorf("LeaseTTL(%s): must be at least 30ms (it is renewed every third of it)", t.cfg.LeaseTTL))
	}
	if len(t.parts) > 0 {
		// Every partition is configured alike: the first one's refusals are every one's.
		errs = append(errs, t.parts[0].t.Validate(t.partitionPolicy(0, p))...)
	}
	return errs
}

// CheckKeys implements source.KeyChecker: every partition's keys.
func (t *transport) CheckKeys(ctx context.Context) error {
	var errs []error
	for _, p := range t.parts {
		if kc, ok := p.t.(source.KeyChecker); ok {
			errs = append(errs, kc.CheckKeys(ctx))
		}
	}
	return errors.Join(errs...)
}

func (t *transport) Open(ctx context.Context) error {
	if err := t.checkLayout(ctx); err != nil {
		return err
	}
	for _, p := range t.parts {
		if err := p.t.Open(ctx); err != nil {
			return fmt.Errorf("partition %d: %w", p.i, err)
		}
	}
	return t.startOwner(ctx)
}

// checkLayout records the stream's partitions in its meta key, or checks them against
// those recorded: a change of N is made only when every partition of the old layout is
// drained (nothing pending or unread by any group, no delay waiting); else Open refuses,
// naming what holds entries.
func (t *transport) checkLayout(ctx context.Context) error {
	rdb, name, n := t.cfg.Stream.Client, t.cfg.Name, t.cfg.Partitions
	got, hash, err := script.PartitionMeta(ctx, rdb, name, n, keys.PartitionHashName, 0)
	if err != nil {
		return fmt.Errorf("partitioned stream %q: %w", name, err)
	}
	if hash != keys.PartitionHashName {
		return fmt.Errorf("partitioned stream %q: its meta key records the hash %q; this version routes with %q", name, hash, keys.PartitionHashName)
	}
	if got == n {
		return nil
	}
	busy, err := t.holding(ctx, got)
	if err != nil {
		return fmt.Errorf("partitioned stream %q: check the layout of %d partitions: %w", name, got, err)
	}
	if len(busy) > 0 {
		return fmt.Errorf("partitioned stream %q has %d partitions, not the %d declared, and its partitions still hold entries (%s): "+
			"moving them would break the order of their keys; drain them first (stop the publishers, let the consumers finish, "+
			"then start with Partitions(%d)), or declare Partitions(%d)", name, got, n, strings.Join(busy, "; "), n, got)
	}
	now, _, err := script.PartitionMeta(ctx, rdb, name, n, keys.PartitionHashName, got)
	if err != nil {
		return fmt.Errorf("partitioned stream %q: %w", name, err)
	}
	if now != n {
		return fmt.Errorf("partitioned stream %q: its partitions changed to %d while this mount changed them from %d to %d", name, now, got, n)
	}
	t.env.Logger.InfoContext(ctx, "settle: partitioned stream re-partitioned (its old layout was drained)",
		"mount", t.env.Mount, "key", name, "from", got, "to", n)
	return nil
}

// holding names the partitions of a layout of n that hold entries a group has not
// settled: pending, unread, or waiting in the mount's delay set.
func (t *transport) holding(ctx context.Context, n int) ([]string, error) {
	rdb := t.cfg.Stream.Client
	var busy []string
	for i := range n {
		key := keys.Partition(t.cfg.Name, i)
		last, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		groups, err := rdb.XInfoGroups(ctx, key).Result()
		if err != nil && !strings.Contains(err.Error(), "no such key") && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for _, g := range groups {
			if g.Pending > 0 {
				busy = append(busy, fmt.Sprintf("%s: %d pending in group %q", key, g.Pending, g.Name))
			} else if len(last) > 0 && idAfter(last[0].ID, g.LastDeliveredID) {
				busy = append(busy, fmt.Sprintf("%s: unread by group %q", key, g.Name))
			}
		}
		if len(groups) == 0 && len(last) > 0 {
			busy = append(busy, key+": entries and no group")
		}
		if dz, ok := t.env.Policy.Delay.(delayed.DurableZset); ok && dz.Key != "" {
			set := keys.InPartition(t.cfg.Name, i, dz.Key)
			if c, err := rdb.ZCard(ctx, set).Result(); err == nil && c > 0 {
				busy = append(busy, fmt.Sprintf("%s: %d delays waiting", set, c))
			}
		}
	}
	return busy, nil
}

// idAfter reports whether stream entry id a comes after b.
func idAfter(a, b string) bool {
	var am, as, bm, bs uint64
	_, _ = fmt.Sscanf(a, "%d-%d", &am, &as)
	_, _ = fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am > bm || am == bm && as > bs
}

// Fetch reads the partitions the mount reads in turn, without blocking, from where the
// last pass stopped, until it has n deliveries or has asked each once; when none had
// any, it blocks on the next one for a share of wait (at least a Redis tick), so that
// an idle mount asks each partition a few times per wait.
func (t *transport) Fetch(ctx context.Context, n int, wait time.Duration) ([]*source.Delivery, error) {
	owned := t.reading()
	if len(owned) == 0 {
		redisbase.PollWait(ctx, wait)
		return nil, nil
	}
	t.mu.Lock()
	start := t.next
	t.mu.Unlock()
	var got []*source.Delivery
	var firstErr error
	for k := range owned {
		p := owned[(start+k)%len(owned)]
		ds, err := t.fetch(ctx, p, n-len(got), -1)
		got = append(got, ds...)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("partition %d: %w", p.i, err)
		}
		if len(got) >= n {
			t.setNext(start + k + 1)
			return got, nil
		}
	}
	t.setNext(start + 1)
	if len(got) > 0 || firstErr != nil {
		// What was read is handed over even when a partition failed: its entries are in
		// flight at their partitions' consumers, and the failed one re-reads its own.
		if len(got) > 0 {
			return got, nil
		}
		return nil, firstErr
	}
	if wait < 0 {
		return nil, nil
	}
	share := wait / time.Duration(len(owned))
	share = min(wait, max(share, 2*redisbase.MinServerBlock))
	p := owned[start%len(owned)]
	ds, err := t.fetch(ctx, p, n, share)
	if err != nil {
		return ds, fmt.Errorf("partition %d: %w", p.i, err)
	}
	return ds, nil
}

// fetch reads up to n deliveries from p (wait as for Fetch) while p is still the
// member's to read, and counts them in flight. The read itself counts as one while it
// lasts, so that the owner does not hand p back under it: what it returns would be
// entries of a partition another member holds.
func (t *transport) fetch(ctx context.Context, p *partition, n int, wait time.Duration) ([]*source.Delivery, error) {
	t.mu.Lock()
	if p.lease.token == "" || p.lease.draining {
		t.mu.Unlock()
		return nil, nil
	}
	p.lease.inflight++
	t.mu.Unlock()
	ds, err := p.t.Fetch(ctx, n, wait)
	t.countInflight(p, len(ds)-1)
	return ds, err
}

func (t *transport) setNext(n int) {
	t.mu.Lock()
	t.next = n
	t.mu.Unlock()
}

// reading returns the partitions the mount reads: those whose lease it holds and that
// are still its own.
func (t *transport) reading() []*partition {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ps []*partition
	for _, p := range t.parts {
		if p.lease.token != "" && !p.lease.draining {
			ps = append(ps, p)
		}
	}
	return ps
}

// reading_ counts n deliveries read from p as in flight (n < 0: settled).
func (t *transport) countInflight(p *partition, n int) {
	t.mu.Lock()
	p.lease.inflight += n
	t.mu.Unlock()
}

// partitionOf returns the partition a delivery was read from.
func (t *transport) partitionOf(d *source.Delivery) *partition {
	return t.parts[t.index[d.Key]]
}

// Ack acknowledges each partition's deliveries at its stream, one call per partition,
// once the member's lease on it is checked (fence).
func (t *transport) Ack(ctx context.Context, ds []*source.Delivery) error {
	groups, order := t.byPartition(len(ds), func(i int) *source.Delivery { return ds[i] })
	errs := make([]error, len(ds))
	failed := false
	for _, p := range order {
		idx := groups[p]
		sub := make([]*source.Delivery, len(idx))
		for k, i := range idx {
			sub[k] = ds[i]
		}
		err := t.fence(ctx, p)
		if err == nil {
			err = p.t.Ack(ctx, sub)
		} else {
			p.t.(forgetter).Forget(sub...)
		}
		t.countInflight(p, -len(sub))
		for k, i := range idx {
			if errs[i] = source.AckError(err, k); errs[i] != nil {
				failed = true
			}
		}
	}
	if !failed {
		return nil
	}
	return &source.AckErrors{Errs: errs}
}

// KeepAttempt records d's attempt at its partition's stream (source.AttemptKeeper); the
// script's check that the entry is pending to this member fences it, as a new owner
// takes a partition's pending entries over before it reads.
func (t *transport) KeepAttempt(ctx context.Context, d *source.Delivery) error {
	k, ok := t.partitionOf(d).t.(source.AttemptKeeper)
	if !ok {
		return nil
	}
	return k.KeepAttempt(ctx, d)
}

// Moves applies each partition's moves at its stream, one call per partition, once the
// member's lease on it is checked (fence); a dead letter goes to the partition's own
// dead-letter stream.
func (t *transport) Moves(ctx context.Context, ms []source.Move) []error {
	groups, order := t.byPartition(len(ms), func(i int) *source.Delivery { return ms[i].Delivery })
	errs := make([]error, len(ms))
	for _, p := range order {
		idx := groups[p]
		sub := make([]source.Move, len(idx))
		for k, i := range idx {
			sub[k] = ms[i]
			if sub[k].Action == source.ActionDeadLetter && sub[k].Dest != "" {
				sub[k].Dest = keys.InPartition(t.cfg.Name, p.i, sub[k].Dest)
			}
		}
		if err := t.fence(ctx, p); err != nil {
			ds := make([]*source.Delivery, len(sub))
			for k, m := range sub {
				ds[k] = m.Delivery
				errs[idx[k]] = err
			}
			p.t.(forgetter).Forget(ds...)
		} else {
			for k, err := range p.t.Moves(ctx, sub) {
				errs[idx[k]] = err
			}
		}
		t.countInflight(p, -len(sub))
	}
	return errs
}

// byPartition groups n deliveries by partition: the indexes of each, and the partitions
// in their first delivery's order.
func (t *transport) byPartition(n int, at func(i int) *source.Delivery) (map[*partition][]int, []*partition) {
	groups := map[*partition][]int{}
	var order []*partition
	for i := range n {
		p := t.partitionOf(at(i))
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], i)
	}
	return groups, order
}

// Paused reports whether the partitioned stream's group is paused: its control key
// (keys.Paused(name, group)) exists.
func (t *transport) Paused(ctx context.Context) (bool, error) {
	return redisbase.Paused(ctx, t.cfg.Stream.Client, t.cfg.Name, t.cfg.Stream.Group)
}

// forgetter is a partition's stream consumer, which can stop counting deliveries as in
// flight without settling them (see fence).
type forgetter interface {
	Forget(ds ...*source.Delivery)
}

// Close hands the member's partitions over at once (every settlement has been applied
// by now) and leaves the group, then closes each partition's consumer.
func (t *transport) Close(ctx context.Context) error {
	var errs []error
	if t.owner != nil {
		errs = append(errs, t.owner.stop(ctx, true))
	}
	for _, p := range slices.Backward(t.parts) {
		errs = append(errs, p.t.Close(ctx))
	}
	return errors.Join(errs...)
}
