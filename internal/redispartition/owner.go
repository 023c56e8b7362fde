package redispartition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// DefaultLeaseTTL is how long a member's lease on a partition (and its membership)
// lasts unless renewed; it is renewed every third of it.
const DefaultLeaseTTL = 10 * time.Second

// ErrLeaseLost is the error of a settlement of a delivery read from a partition whose
// lease the member no longer holds: the partition's new owner took its pending entries
// over and delivers them again.
var ErrLeaseLost = source.TakenOver("the partition's lease was lost")

// takeOver is what a partition's stream consumer does when its member takes the
// partition: it claims the entries the group's other consumers left pending.
type takeOver interface {
	TakeOver(ctx context.Context) (int, error)
}

// owner keeps the member's partitions: it beats the group's membership, computes which
// partitions are the member's (assign: rendezvous hashing over the live members, its
// load bounded), takes their
// leases, renews them, and hands back those no longer its own once nothing of them is
// in flight. It runs from Open to Close on one goroutine.
type owner struct {
	t       *transport
	cancel  context.CancelFunc
	done    chan struct{}
	members string // the group's members key
}

// lease is the member's hold on one partition, under transport.mu.
type lease struct {
	draining bool   // no longer the member's: read nothing more, hand back once inflight is 0
	inflight int    // deliveries read and not yet settled, and reads of it in progress (fetch)
	token    string // the fencing token held; "" when not held
}

// leaseTTL is the mount's lease TTL.
func (t *transport) leaseTTL() time.Duration {
	if t.cfg.LeaseTTL > 0 {
		return t.cfg.LeaseTTL
	}
	return DefaultLeaseTTL
}

// now is the "now" of the lease scripts: a test's fake clock in ms, else -1 for the
// Redis server's TIME.
func (t *transport) now() int64 {
	if c := t.env.TestClock; c != nil {
		return c.Now().UnixMilli()
	}
	return -1
}

// startOwner takes the member's partitions once, then keeps them on a goroutine until
// stopOwner.
func (t *transport) startOwner(ctx context.Context) error {
	o := &owner{t: t, done: make(chan struct{}), members: keys.PartitionMembers(t.cfg.Name, t.cfg.Stream.Group)}
	if err := o.step(ctx, false); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel = cancel
	t.owner = o
	go o.loop(lctx)
	return nil
}

func (o *owner) loop(ctx context.Context) {
	defer close(o.done)
	every := o.t.leaseTTL() / 3
	for {
		tm := o.t.env.Clock.NewTimer(every)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C():
		}
		if err := o.step(ctx, false); err != nil && ctx.Err() == nil {
			o.t.env.Logger.WarnContext(ctx, "settle: partition ownership step failed; retrying at the next beat",
				slog.String(source.AttrMount, o.t.env.Mount), slog.Any(source.AttrError, err))
		}
	}
}

// stop ends the loop; handBack hands every lease back and leaves the group (a graceful
// stop), else the leases run out on their own (as after a crash).
func (o *owner) stop(ctx context.Context, handBack bool) error {
	o.cancel()
	<-o.done
	if !handBack {
		return nil
	}
	return o.step(ctx, true)
}

// step beats the membership and brings the member's leases in line with the live
// members (leaving: hands every lease back).
func (o *owner) step(ctx context.Context, leaving bool) error {
	t := o.t
	ttl, me := t.leaseTTL(), t.cfg.Stream.Consumer
	live, err := script.MemberBeat(ctx, t.cfg.Stream.Client, o.members, me, ttl, t.now(), leaving)
	if err != nil {
		return err
	}
	if !leaving && !contains(live, me) {
		live = append(live, me)
	}
	owners := assign(live, len(t.parts))
	var errs []error
	for _, p := range t.parts {
		mine := !leaving && owners[p.i] == me
		errs = append(errs, o.keep(ctx, p, mine, leaving, ttl))
	}
	return errors.Join(errs...)
}

// keep takes, renews or hands back p's lease as mine says. A partition no longer the
// member's is handed back once nothing read from it is in flight; when the member
// leaves (a graceful stop, after the mount has drained) at once: what it still counts in
// flight is left pending (an Ordered retry waiting in place, a delivery released), for
// the new owner to take over.
func (o *owner) keep(ctx context.Context, p *partition, mine, leaving bool, ttl time.Duration) error {
	t := o.t
	rdb, me := t.cfg.Stream.Client, t.cfg.Stream.Consumer
	t.mu.Lock()
	l := p.lease
	if l.token != "" {
		p.lease.draining = !mine
	}
	t.mu.Unlock()
	switch {
	case l.token == "" && !mine:
		return nil
	case l.token != "" && !mine && (l.inflight == 0 || leaving):
		st, _, err := script.Lease(ctx, rdb, p.leaseKey, me, l.token, ttl, t.now(), true)
		if err != nil {
			return err
		}
		t.setToken(p, "")
		if st == script.LeaseHeld {
			t.logChange(ctx, "settle: partition handed over", p, l.token)
		}
		return nil
	}
	// Take it, or renew it (also while draining: its deliveries still settle).
	st, tok, err := script.Lease(ctx, rdb, p.leaseKey, me, l.token, ttl, t.now(), false)
	if err != nil {
		return err
	}
	switch st {
	case script.LeaseHeld:
		return nil
	case script.LeaseOther:
		if l.token != "" {
			t.setToken(p, "")
			t.logChange(ctx, "settle: partition lease lost", p, "held by "+tok)
		}
		return nil
	}
	// Taken: its unsettled entries first, then new ones.
	n, err := p.t.(takeOver).TakeOver(ctx)
	if err != nil {
		// Not read until taken over: hand it back, the next beat tries again.
		_, _, _ = script.Lease(ctx, rdb, p.leaseKey, me, tok, ttl, t.now(), true)
		t.setToken(p, "")
		return fmt.Errorf("partition %d: %w", p.i, err)
	}
	t.setToken(p, tok)
	t.logChange(ctx, "settle: partition taken", p, "token "+tok+", "+strconv.Itoa(n)+" pending entries taken over")
	return nil
}

func (t *transport) setToken(p *partition, tok string) {
	t.mu.Lock()
	p.lease.token = tok
	if tok == "" {
		p.lease.draining = false
	}
	t.mu.Unlock()
}

// logChange logs one ownership change at Info.
func (t *transport) logChange(ctx context.Context, msg string, p *partition, detail string) {
	t.env.Logger.InfoContext(ctx, msg, slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, p.key),
		slog.Int("partition", p.i), slog.String("member", t.cfg.Stream.Consumer), slog.String("detail", detail))
}

// fence returns nil when the member still holds p's lease under the token it read
// with, checked against the lease key (one HGET) just before a settlement batch;
// ErrLeaseLost otherwise.
func (t *transport) fence(ctx context.Context, p *partition) error {
	t.mu.Lock()
	tok := p.lease.token
	t.mu.Unlock()
	if tok == "" {
		return fmt.Errorf("partition %d: %w", p.i, ErrLeaseLost)
	}
	vals, err := t.cfg.Stream.Client.HMGet(ctx, p.leaseKey, "owner", "token").Result()
	if err != nil {
		return fmt.Errorf("partition %d: check lease: %w", p.i, err)
	}
	if owner, _ := vals[0].(string); owner != t.cfg.Stream.Consumer {
		return fmt.Errorf("partition %d: %w (held by %q)", p.i, ErrLeaseLost, owner)
	}
	if cur, _ := vals[1].(string); cur != tok {
		return fmt.Errorf("partition %d: %w (token %s, now %s)", p.i, ErrLeaseLost, tok, cur)
	}
	return nil
}

// assign returns the owner of each of n partitions among live: rendezvous hashing with
// a bound on the load. Every (partition, member) pair has a weight (weight); pairs are
// taken from the heaviest down, each partition going to the first member that weighs
// most for it and still holds less than its share (n/members, one more for the first
// n%members members to reach it). So no member holds more than one partition over another (plain rendezvous put 8, 5 and 3 of 16 on three members),
// every member computes the same answer from the same live list, and a join or a leave
// moves few partitions beyond the 1/members that change hands anyway.
func assign(live []string, n int) []string {
	owners := make([]string, n)
	if len(live) == 0 {
		return owners
	}
	type pair struct {
		w uint64
		m string
		i int
	}
	pairs := make([]pair, 0, n*len(live))
	for i := range n {
		for _, m := range live {
			pairs = append(pairs, pair{weight(m, i), m, i})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		if c := strings.Compare(a.m, b.m); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	// Each member holds base partitions, or base+1 for the first extra members to get
	// there: every partition finds one, and loads differ by one at most.
	base, extra := n/len(live), n%len(live)
	load := make(map[string]int, len(live))
	left := n
	for _, p := range pairs {
		if owners[p.i] != "" || load[p.m] > base || load[p.m] == base && extra == 0 {
			continue
		}
		if load[p.m] == base {
			extra--
		}
		owners[p.i] = p.m
		load[p.m]++
		if left--; left == 0 {
			break
		}
	}
	return owners
}

// weight is member m's random weight for partition i: the mixed FNV-1a 64 of m "/" i.
func weight(m string, i int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(m + "/" + strconv.Itoa(i)))
	return mix(h.Sum64())
}

// mix is splitmix64's finalizer: FNV-1a alone orders short names that differ in one
// byte alike for every partition, so one member would weigh most for all of them.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
