package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// claimStream is the stream consumer a claimer claims for and heartbeats: the group's
// keys, the consumer's name, and the deliveries it has in flight.
type claimStream struct {
	consumer string
	env      source.Env
	group    string
	key      string
	owner    claimOwner
	rdb      redis.UniversalClient
}

// gateKey is the group's scan key (see claimer.startPass).
func (s *claimStream) gateKey() string { return keys.Derived(s.key, "claim-scan:"+s.group) }

// claimOwner is the stream transport a claimer serves.
type claimOwner interface {
	// recreateGroup makes the stream and its group again (after NOGROUP), and says so.
	recreateGroup(ctx context.Context) error
	// deliveries turns claimed entries into deliveries, marking them in flight (and
	// taken over, when taken).
	deliveries(ctx context.Context, msgs []redis.XMessage, taken bool) []*source.Delivery
	// inflightIDs returns the ids of the entries in flight.
	inflightIDs() []string
	// takeoverRoom returns how many entries a scan may take over now.
	takeoverRoom() int
	// stillInflight returns those of ids still in flight.
	stillInflight(ids []string) []string
}

// claimTestPoll bounds a read under a test's fake clock: the test may advance the clock
// at any moment, and the next scan must see it soon.
const claimTestPoll = 5 * time.Millisecond

// claimPollMin bounds how often a consumer whose last scan found nothing idle scans its
// group's pending entries again.
const claimPollMin = 10 * time.Millisecond

// claimer takes a stream group's idle pending entries over to one consumer: on a
// claiming stream its own left-pending retries and the entries of crashed consumers; with
// Reclaim, the entries of dead consumers. While handlers run, it heartbeats their
// entries so that no other consumer claims them.
type claimer struct {
	// s is the stream consumer the claimer claims for (set by attach).
	s claimStream
	// leaves: retries stay pending to be claimed back (a claiming stream); else they are
	// copies (Reclaim). Either way a claimed delivery's attempt adds Redis's delivery
	// count to the retry-count header.
	leaves bool
	// idle is how long an entry must be idle to be claimed.
	idle time.Duration
	// name names the setting of idle in the user's words, for refusals: a format of
	// one %s, the idle ("Reclaim(%s)").
	name string
	// onBeat, when set (tests), is called after each heartbeat.
	onBeat func()
	// poll is how long after a scan that found nothing the next one comes.
	poll time.Duration

	mu        sync.Mutex
	cursor    string      // where the next XAUTOCLAIM starts
	pending   int         // what the last scan call said is pending in the group (-1: a pass is not over)
	dues      []leftBatch // the entries this consumer left pending, by when they come due
	nextScan  time.Time   // no scan before this
	lotFull   bool        // a scan was due, but the last lot taken over is unsettled
	nextPrune time.Time   // no prune of idle consumers before this

	serial sync.Mutex // a heartbeat, a Leave, a release and a claim do not interleave (see fetch)
	// touchedAt (held by serial) is when the last heartbeat that touched every entry in
	// flight here started, or when the claimer started: no entry in flight has been idle
	// longer than since then, give or take a read's round trip.
	touchedAt time.Time
	// warned (held by serial): the entries in flight here already reported taken over,
	// and whether the last heartbeat failed, so that each is warned once per occurrence,
	// not on every heartbeat while the handler runs or the server is away.
	warned     map[string]struct{}
	beatFailed bool
	done       chan struct{}
	stop       context.CancelFunc
}

// newClaimer returns a claimer of entries idle for idle, for the consumer s. After a scan that found nothing,
// the next one comes a read's block (or idle/2, if shorter) later: an entry a crashed
// consumer left is claimed at most that long after it became idle enough.
func newClaimer(s claimStream, name string, idle, block time.Duration, leaves bool, onBeat func()) *claimer {
	return &claimer{s: s, leaves: leaves, cursor: "0-0", idle: idle, name: name, onBeat: onBeat, pending: -1, poll: max(min(idle/2, block), claimPollMin)}
}

// quiet is how long after a pass that found nothing pending in the group (no entry at
// any consumer, this one's included) the next scan comes: an entry read after that pass
// is idle enough to be claimed no sooner than idle later, so waiting up to idle keeps the
// bound (claimed at most poll after it became idle enough). It is at most ten polls:
// entries a stopping consumer hands back (released, idle past min-idle at once) wait no
// longer than that; a restarted process's new consumer scans at once.
func (c *claimer) quiet() time.Duration { return max(min(c.idle, 10*c.poll), c.poll) }

// leavesRetries reports whether retries stay pending here to be claimed back (a
// claiming stream): then the consumer never re-reads its own pending entries, which
// would bring them back before their min-idle.
func (c *claimer) leavesRetries() bool { return c != nil && c.leaves }

// validate returns the refusals of the claimer's settings (none for a nil claimer).
func (c *claimer) validate() []error {
	if c != nil && c.idle < time.Millisecond {
		return []error{fmt.Errorf("%s: must be at least 1ms (Redis counts idle time in milliseconds)", fmt.Sprintf(c.name, c.idle))}
	}
	return nil
}

// leftHere returns the ids of the entries this consumer left pending (nil: none).
func (c *claimer) leftHere() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.dues) == 0 {
		return nil
	}
	own := map[string]bool{}
	for _, b := range c.dues {
		for _, id := range b.ids {
			own[id] = true
		}
	}
	return own
}

// leftBatch is entries this consumer left pending together: they come due at due.
type leftBatch struct {
	due time.Time
	ids []string
}

// fetch claims up to max idle entries: first those this consumer left pending that came
// due (XCLAIM of their ids), else the group's, scanning its pending entries from where
// the last call stopped until it claims some or has scanned them all, no more than a
// lot (see streamTransport.takeoverRoom). It scans only when the last scan filled its
// lot or is poll old, and starts a new pass only when no
// other consumer of the group started one in the last poll (see startPass); under a
// test's fake clock (whose Advance may make any entry idle enough) it always scans.
func (c *claimer) fetch(ctx context.Context, max int) ([]*source.Delivery, error) {
	now := c.s.env.Clock.Now()
	c.mu.Lock()
	own := c.takeDue(now, min(max, maxOwnClaim))
	scan := !now.Before(c.nextScan) || c.s.env.TestClock != nil
	cursor := c.cursor
	c.mu.Unlock()

	if len(own) > 0 {
		ds, err := c.claim(ctx, "", len(own), own)
		if err != nil || len(ds) > 0 || !scan {
			return ds, err
		}
	} else if !scan {
		return nil, nil
	}
	// A scan takes over a lot at a time (see takeoverRoom); with none free it waits for
	// the last lot to settle, not for poll.
	lot := min(max, c.s.owner.takeoverRoom())
	c.mu.Lock()
	c.lotFull = lot <= 0
	c.mu.Unlock()
	if lot <= 0 {
		return nil, nil
	}
	if cursor == "0-0" && c.s.env.TestClock == nil {
		if !c.startPass(ctx) {
			c.mu.Lock()
			c.nextScan = now.Add(c.poll)
			c.mu.Unlock()
			return nil, nil
		}
		c.prune(ctx, now)
	}
	for {
		ds, err := c.claim(ctx, cursor, lot, nil)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		cursor = c.cursor
		if len(ds) > 0 || cursor == "0-0" {
			// A scan that filled its lot goes on at the next read; one that found fewer
			// (or nothing in a whole pass) waits poll: scanning a long pending list for a
			// few entries costs Redis more than all else a claiming stream does. A pass
			// that found nothing pending at all waits quiet.
			switch {
			case len(ds) == 0 && c.pending == 0:
				c.nextScan = now.Add(c.quiet())
			case len(ds) < lot:
				c.nextScan = now.Add(c.poll)
			}
			c.mu.Unlock()
			return ds, nil
		}
		c.mu.Unlock()
	}
}

// startPass reports whether this consumer may start a pass over its group's pending
// list: one consumer of the group starts one per poll (script.StartScan, on the group's
// scan key, derived from the stream's), as every consumer's pass finds the same entries
// and each costs Redis a step per pending entry. A pass another consumer started
// meanwhile claims what there is to claim. If the key cannot be written (an error, an
// ACL refusing it), the pass starts: a scan too many, never one too few.
func (c *claimer) startPass(ctx context.Context) bool {
	s := &c.s
	ok, err := script.StartScan(ctx, s.rdb, s.gateKey(), s.consumer, c.poll)
	if err != nil {
		s.env.Logger.DebugContext(ctx, "settle: could not mark the start of a claim scan; scanning anyway",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.Any(source.AttrError, err))
		return true
	}
	return ok
}

// pruneIdle is how long a consumer of the group must have been idle, holding no entry,
// to be removed from the group (see prune): far past any handler or restart.
func (c *claimer) pruneIdle() time.Duration { return max(10*c.idle, 10*time.Minute) }

// prune removes from the group the consumers that hold no pending entry and have been
// idle for pruneIdle (processes that stopped: default consumer names are unique per
// process, and would pile up), at most once per pruneIdle, by the consumer that started
// a scan pass. A removal that fails is logged and tried at the next one.
func (c *claimer) prune(ctx context.Context, now time.Time) {
	c.mu.Lock()
	due := !now.Before(c.nextPrune)
	if due {
		c.nextPrune = now.Add(c.pruneIdle())
	}
	c.mu.Unlock()
	if !due {
		return
	}
	s := &c.s
	removed, err := script.PruneConsumers(ctx, s.rdb, s.key, s.group, s.consumer, c.pruneIdle())
	switch {
	case err != nil:
		s.env.Logger.WarnContext(ctx, "settle: could not remove idle consumers from the group",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.Any(source.AttrError, err))
	case len(removed) > 0:
		s.env.Logger.InfoContext(ctx, "settle: removed consumers that held no entry and were idle",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.String(source.AttrGroup, s.group), slog.Any("consumers", removed))
	}
}

// maxOwnClaim bounds the ids one claim of due left-pending entries lists.
const maxOwnClaim = 1000

// atRisk returns the ids in flight here that a claim might find idle long enough: all of
// them, unless a heartbeat touched them all less than half of idle ago (then none has
// been idle that long, and the claim need not be sent them: on a claiming stream with
// many handlers, most of its Redis CPU). Under a test's fake clock, all of them. c.serial
// is held.
func (c *claimer) atRisk() []string {
	if c.s.env.TestClock == nil && c.s.env.Clock.Now().Sub(c.touchedAt) < c.idle/2 {
		return nil
	}
	return c.s.owner.inflightIDs()
}

// takeDue takes up to max ids of the entries left pending that are due at now, each once:
// an entry left again after a scan claimed it back is in dues twice, and an id listed
// twice in one XCLAIM is claimed (its delivery count raised) twice. c.mu is held.
func (c *claimer) takeDue(now time.Time, max int) []string {
	var ids []string
	var seen map[string]bool
	for len(c.dues) > 0 && len(ids) < max && !now.Before(c.dues[0].due) {
		b := &c.dues[0]
		for len(b.ids) > 0 && len(ids) < max {
			id := b.ids[0]
			b.ids = b.ids[1:]
			if seen == nil {
				seen = map[string]bool{}
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if len(b.ids) == 0 {
			c.dues = c.dues[1:]
		}
	}
	return ids
}

// claim runs one claim script call: the ids listed, or (ids nil) up to max entries of
// the group from cursor on, whose next cursor it records. It returns the claimed
// deliveries, their attempts counting Redis's deliveries.
func (c *claimer) claim(ctx context.Context, cursor string, max int, ids []string) ([]*source.Delivery, error) {
	s := &c.s
	// Entries in flight here are skipped inside the script: one whose handler acks it
	// meanwhile must not be delivered again. A Leave waits for the claim (and a claim
	// for a Leave): an entry left just after the snapshot would be skipped, and the
	// skip restarts its idle time.
	c.serial.Lock()
	inflight := c.atRisk()
	var res script.ClaimResult
	var err error
	if ids != nil {
		res, err = script.ClaimIDs(ctx, s.rdb, s.key, s.group, s.consumer, c.idle, ids, inflight...)
	} else {
		res, err = script.Claim(ctx, s.rdb, s.key, s.group, s.consumer, c.idle, cursor, max, inflight...)
	}
	c.serial.Unlock()
	if err != nil {
		if strings.Contains(err.Error(), "NOGROUP") {
			// The stream or its group was deleted: make them again, as a read does. The
			// new group has no pending entries: the scan is over.
			c.mu.Lock()
			c.cursor = "0-0"
			c.mu.Unlock()
			return nil, s.owner.recreateGroup(ctx)
		}
		return nil, fmt.Errorf("stream %q: claim idle entries: %w", s.key, err)
	}
	if len(res.Deleted) > 0 {
		s.env.Logger.WarnContext(ctx, "settle: pending entries were deleted from the stream before they were settled; Redis dropped them from the pending list",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.Any("ids", res.Deleted))
	}
	if ids == nil {
		c.mu.Lock()
		c.cursor, c.pending = res.Next, res.Pending
		c.mu.Unlock()
	}
	ds := s.owner.deliveries(ctx, res.Entries, ids == nil) // a scan's are taken over
	if len(ds) > 0 {
		counts := make(map[string]int, len(res.Entries))
		for i, e := range res.Entries {
			counts[e.ID] = res.Counts[i]
		}
		var own map[string]bool // of a scan's, the entries this consumer left pending itself
		if ids == nil && c.leaves {
			own = c.leftHere()
		}
		claimed := 0
		for _, d := range ds {
			d.Attempt = d.RetryCount + counts[d.ID]
			if ids == nil && !own[d.ID] { // ids are this consumer's own left retries
				d.Redelivered = true
				claimed++
			}
		}
		if claimed > 0 {
			s.env.Emit(ctx, source.Event{Kind: source.EventClaim, Count: claimed})
		}
	}
	return ds, nil
}

// bound shortens wait, a read's block, so that the read ends by the next scan (and, under
// a test's fake clock, soon after any advance). A read shorter than its Block wakes a
// server tick early (see streamTransport.read), which a due retry needs; a scan does not,
// and one woken early would wait out the rest in a second, short read: the bound to the
// next scan is a tick longer.
func (c *claimer) bound(wait time.Duration) time.Duration {
	if wait < 0 {
		return wait
	}
	if c.s.env.TestClock != nil {
		wait = min(wait, claimTestPoll)
	}
	now := c.s.env.Clock.Now()
	c.mu.Lock()
	next := c.nextScan.Add(redisbase.MinServerBlock)
	if c.lotFull {
		// The due scan waits for the lot to settle, which no read wakes on: look again
		// soon, not at once.
		next = now.Add(claimPollMin)
	}
	if len(c.dues) > 0 && c.dues[0].due.Before(next) {
		next = c.dues[0].due
	}
	c.mu.Unlock()
	if d := next.Sub(now); d < wait {
		return max(d, time.Millisecond)
	}
	return wait
}

// left records that the entries ids were left pending at (after their idle times were
// reset): they come due idle later.
func (c *claimer) left(at time.Time, ids []string) {
	due := at.Add(c.idle)
	c.mu.Lock()
	i := len(c.dues)
	for i > 0 && c.dues[i-1].due.After(due) {
		i--
	}
	if i > 0 && c.dues[i-1].due.Equal(due) {
		c.dues[i-1].ids = append(c.dues[i-1].ids, ids...)
	} else {
		c.dues = slices.Insert(c.dues, i, leftBatch{due: due, ids: ids})
	}
	c.mu.Unlock()
}

// start starts the heartbeat (nothing for a nil claimer); close stops it.
func (c *claimer) start(ctx context.Context) {
	if c == nil {
		return
	}
	ctx, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	c.done = make(chan struct{})
	c.serial.Lock()
	c.touchedAt = c.s.env.Clock.Now()
	c.serial.Unlock()
	go func() {
		defer close(c.done)
		c.beat(ctx)
	}()
}

func (c *claimer) close() {
	if c != nil && c.stop != nil {
		c.stop()
		<-c.done
		c.stop = nil
	}
}

// beat resets the idle time of the entries in flight here every idle/3 on the App's
// clock, until ctx ends.
func (c *claimer) beat(ctx context.Context) {
	every := max(c.idle/3, time.Millisecond)
	tm := c.s.env.Clock.NewTimer(every)
	for {
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C():
		}
		c.touchInflight(ctx, every)
		tm = c.s.env.Clock.NewTimer(every)
		if c.onBeat != nil {
			c.onBeat() // after the next timer exists, so a test may advance past it
		}
	}
}

func (c *claimer) touchInflight(ctx context.Context, every time.Duration) {
	c.serial.Lock()
	defer c.serial.Unlock()
	s := &c.s
	at := s.env.Clock.Now()
	ids := s.owner.inflightIDs()
	if len(ids) == 0 {
		c.touchedAt = at
		return
	}
	tctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
	defer cancel()
	lost, err := script.Touch(tctx, s.rdb, s.key, s.group, s.consumer, ids...)
	if err == nil {
		c.touchedAt = at
	}
	if err != nil {
		if !c.beatFailed {
			s.env.Logger.WarnContext(ctx, "settle: heartbeat of entries in flight failed; another consumer may claim them (warned once until a heartbeat succeeds)",
				slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.Any(source.AttrError, err))
		}
		c.beatFailed = true
		return
	}
	if c.beatFailed {
		c.beatFailed = false
		s.env.Logger.InfoContext(ctx, "settle: heartbeat of entries in flight succeeds again", slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key))
	}
	// Entries settled since the snapshot are not pending any more: only those still in
	// flight here and now pending at another consumer were taken over (one still in
	// flight but pending nowhere was acknowledged by us a moment before the touch, its
	// settlement not yet recorded).
	if taken := c.newlyTaken(ids, c.takenOver(tctx, s.owner.stillInflight(lost))); len(taken) > 0 {
		s.env.Logger.WarnContext(ctx, "settle: entries in flight here were claimed by another consumer (their idle time passed before a heartbeat); they may be handled twice",
			slog.String(source.AttrMount, s.env.Mount), slog.String(source.AttrKey, s.key), slog.Any("ids", taken))
	}
}

// newlyTaken returns those of taken not warned of yet, and remembers them while they
// are among inflight (the ids of this heartbeat): a handler that runs on after its
// entry was taken over is warned of once, not at every heartbeat. serial is held.
func (c *claimer) newlyTaken(inflight, taken []string) []string {
	if len(c.warned) > 0 {
		still := make(map[string]struct{}, len(c.warned))
		for _, id := range inflight {
			if _, ok := c.warned[id]; ok {
				still[id] = struct{}{}
			}
		}
		c.warned = still
	}
	var fresh []string
	for _, id := range taken {
		if _, ok := c.warned[id]; ok {
			continue
		}
		if c.warned == nil {
			c.warned = map[string]struct{}{}
		}
		c.warned[id] = struct{}{}
		fresh = append(fresh, id)
	}
	return fresh
}

// takenOver returns those of ids that are pending at another consumer of the group. An
// id it cannot look up counts as taken over (the warning errs on the side of saying).
func (c *claimer) takenOver(ctx context.Context, ids []string) []string {
	var out []string
	s := &c.s
	for _, id := range ids {
		p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.key, Group: s.group, Start: id, End: id, Count: 1}).Result()
		if err != nil || (len(p) == 1 && p[0].Consumer != s.consumer) {
			out = append(out, id)
		}
	}
	return out
}
