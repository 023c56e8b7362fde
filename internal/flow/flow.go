// Package flow is the engine's gate for a mount's flow limits (settle.RateLimit,
// RateLimitBy, ConcurrencyBy): whether a delivery may start now, where it waits when
// it may not, and the leases of the concurrency slots it holds while it runs. The
// decisions are here; the state lives beside the source, shared by every process that
// reads it, behind the transport's source.Limiter.
//
// A delivery that must wait is not started and spends no attempt: the engine hands it
// here instead of to its handler and it waits where the transport keeps it (a stream
// entry pending to this consumer and heartbeated, a list item in the processing list),
// holding no worker and no read slot, so that the mount reads on and the deliveries of
// other keys start without it. A delivery whose rate limits let it start within
// Horizon reserves that start and begins then without asking again; otherwise it asks
// again when its limit says it may (of the deliveries one rate limit's value refused in
// a process, only the head of their line asks, the next once it took a start), when a
// slot of its key is freed in this process, or after SlotPoll when a slot is held
// elsewhere. A start that comes later than its rate limit's slack is given up and asked
// again (see SlackShare), so that handlers' starts, not only the limit's clock, keep to
// n + burst in any window of the period.
package flow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// SlotPoll is the longest a delivery waiting for a concurrency slot held in another
// process waits before it asks again (a slot freed in this process wakes it at once).
const SlotPoll = 50 * time.Millisecond

// Horizon is how far ahead a delivery waiting for a rate limit reserves its start: one
// whose start is due within it takes its place at once and starts then without asking
// again, so that the deliveries waiting for one limit do not all ask at once when it
// comes due; one due later asks again once its start is within the horizon. A process
// that stops or crashes loses at most Horizon of its limits' starts.
const Horizon = time.Second

// SlackShare is the share of a rate limit's period by which a start may begin late, and
// the share its rate is lowered by to keep room for that: a rate limit of n per period
// per spaces its starts (per + per/SlackShare)/n apart, 2 % under n, so that starts
// each begun no later than per/SlackShare after the start its limit let through (a
// reserved start whose timer fired late, a take whose answer came back slowly) still
// number at most n + burst in any window of per. A start later than that is not begun:
// its place is given up and it asks again (see MaxLate).
const SlackShare = 50

// MaxLate is how many starts a delivery gives up because it came to them late before it
// begins one however late, counted until it starts, across its waits: a process stalled
// longer than the slack at every try starts its deliveries late (its starts may then
// bunch past n + burst) rather than never.
const MaxLate = 3

// Slack is how late a start of a rate limit of period per may begin (see SlackShare).
func Slack(per time.Duration) time.Duration { return per / SlackShare }

// ErrorWait is how long a delivery waits when its limits' state could not be read (the
// server is away): it never starts unchecked.
const ErrorWait = time.Second

// Limit is one flow limit of a mount.
type Limit struct {
	// Burst is how many starts a rate limit lets through at once (at least 1).
	Burst int
	// KeyFunc gives a delivery's key value; nil for a mount-wide limit.
	KeyFunc func(d *source.Delivery) string
	// N is a rate limit's starts per Per, or a concurrency limit's slots.
	N int
	// Per is a rate limit's period; 0 makes it a concurrency limit.
	Per time.Duration
}

// Slots reports whether l is a concurrency limit.
func (l Limit) Slots() bool { return l.Per == 0 }

// Config is a Gate's.
type Config struct {
	// Clock is the App's clock: waits and lease renewals run on it.
	Clock clock.Clock
	// Lease is how long a concurrency slot is held without a renewal: a crashed
	// process's slots come free within it. Renewed every Lease/3.
	Lease time.Duration
	// Limits are the mount's limits, in the order declared.
	Limits []Limit
	// Logger logs waits (Debug) and lost slots (Warn).
	Logger *slog.Logger
	// MaxWaiting bounds the deliveries waiting at once; Room blocks the read loop
	// while that many wait.
	MaxWaiting int
	// Resume is called, from the gate's goroutine, with a waiting delivery once it may
	// try again; it returns false when the mount stops first (the delivery is then
	// handed back by Stop's caller).
	Resume func(d *source.Delivery) bool
	// Store keeps the limits' state.
	Store source.Limiter
}

// Gate decides, for one mount, whether deliveries may start under its limits.
type Gate struct {
	cfg    Config
	names  []string
	q      *timerq.Queue
	seq    atomic.Uint64
	prefix string
	stop   chan struct{} // closed by Stop: waits end
	done   chan struct{} // closed once the waits' goroutine returned
	quit   chan struct{} // closed by Close: renewals end
	closed chan struct{} // closed once the renewals' goroutine returned

	mu       sync.Mutex
	held     map[*Ticket]struct{}             // tickets whose slots are renewed
	waiting  map[*source.Delivery]*waiter     // deliveries waiting to try again
	byValue  map[string]map[*waiter]struct{}  // slot waiters by limit and value
	lines    map[string]*rateLine             // rate waiters by limit and value
	roomFree chan struct{}                    // closed when the waiting set falls below MaxWaiting
	resuming int                              // deliveries handed to Resume that it has not taken yet
	resumed  chan struct{}                    // closed when resuming falls to 0
	waited   map[*source.Delivery]waitRecord  // deliveries that waited, until they start
	reserved map[*source.Delivery]reservation // deliveries whose start is reserved
	lates    map[*source.Delivery]int         // starts each delivery gave up for lateness, until it starts
	lateness atomic.Int64                     // starts given up because they came late
	stopped  bool                             // Stop was called: parked deliveries wait for TakeWaiting

	reported bool // the renewals' goroutine's: the last waiting counts reported were not all zero
}

// waiter is one waiting delivery.
type waiter struct {
	d     *source.Delivery
	slots []string // byValue keys it is in
	which int      // the index of the limit it waits for (-1: the limits were unreachable)
}

// rateLine is the deliveries of this process that one rate limit's value refused: only
// its head asks again (when the line's wait ends, or at once when a delivery of the
// value took a start), so that the deliveries waiting for one limit do not all ask each
// time it comes due, keeping the process's workers and Redis busy with refusals while
// reserved starts wait for them.
type rateLine struct {
	ws   []*waiter
	wait time.Duration // the last refusal's wait
	gen  uint64        // only the newest scheduled wake of the line acts
}

// waitRecord is why and since when a delivery waited: its log line says so.
type waitRecord struct {
	kind   string
	reason string
	since  time.Time
}

// reservation is a reserved start: the ticket it holds and the latest it may begin.
type reservation struct {
	t  *Ticket
	by time.Time // zero: no deadline (no rate limit asked the wait)
}

// Ticket is what a started delivery holds: its concurrency slots, freed by Done.
type Ticket struct {
	held []source.Held
	// Kind is what the delivery waited for, without its key value (a metric's label):
	// WaitRate, WaitConcurrency or WaitUnreachable; "" when it did not wait.
	Kind string
	// Reason and Waited say why and how long the delivery waited before it started ("",
	// 0: it did not).
	Reason string
	Waited time.Duration
}

// The kinds of wait (Ticket.Kind).
const (
	// WaitConcurrency: every slot of a concurrency limit was held.
	WaitConcurrency = "concurrency"
	// WaitRate: a rate limit had no start free.
	WaitRate = "rate"
	// WaitUnreachable: the limits' state could not be read.
	WaitUnreachable = "unreachable"
)

// New returns a gate; Start runs it.
func New(c Config) *Gate {
	var b [6]byte
	_, _ = rand.Read(b[:])
	g := &Gate{
		cfg:      c,
		q:        timerq.New(c.Clock),
		prefix:   hex.EncodeToString(b[:]) + "-",
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		quit:     make(chan struct{}),
		closed:   make(chan struct{}),
		held:     map[*Ticket]struct{}{},
		waiting:  map[*source.Delivery]*waiter{},
		byValue:  map[string]map[*waiter]struct{}{},
		lines:    map[string]*rateLine{},
		waited:   map[*source.Delivery]waitRecord{},
		reserved: map[*source.Delivery]reservation{},
		lates:    map[*source.Delivery]int{},
	}
	g.names = Names(c.Limits)
	return g
}

// Names returns the names that tell a mount's limits apart in their state's keys (the
// Gate's Name): "rate", "rateby" or "slots" by kind, then "rateby2", … for a second
// limit of a kind, in the order declared. settle/admin names them the same way to read
// their state.
func Names(limits []Limit) []string {
	count := map[string]int{}
	names := make([]string, 0, len(limits))
	for _, l := range limits {
		kind := "slots"
		if !l.Slots() {
			kind = "rate"
			if l.KeyFunc != nil {
				kind = "rateby"
			}
		}
		count[kind]++
		if count[kind] > 1 {
			kind += strconv.Itoa(count[kind])
		}
		names = append(names, kind)
	}
	return names
}

// Start runs the gate's waits until Stop and its lease renewals, under ctx, until
// Close.
func (g *Gate) Start(ctx context.Context) {
	go func() { defer close(g.done); g.q.Run(g.stop) }()
	go func() { defer close(g.closed); g.renewLoop(ctx) }()
}

// Close ends the lease renewals, once no delivery of the mount runs.
func (g *Gate) Close() {
	close(g.quit)
	<-g.closed
}

// Stop ends the waits and returns the deliveries still waiting, for the engine to hand
// back: none of them started. Once it returns, Resume is not called again.
func (g *Gate) Stop(ctx context.Context) []*source.Delivery {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	return g.TakeWaiting(ctx)
}

// TakeWaiting returns the deliveries waiting now and forgets them: after Stop, those
// that a worker parked since (its Admit refused while the mount stopped), for the
// engine to hand back once its workers have returned. The slots of those whose start
// was reserved are freed (their rate limits' reserved starts are not given back).
func (g *Gate) TakeWaiting(ctx context.Context) []*source.Delivery {
	g.mu.Lock()
	ds := make([]*source.Delivery, 0, len(g.waiting))
	var tickets []*Ticket
	for d := range g.waiting {
		ds = append(ds, d)
		if r, ok := g.reserved[d]; ok {
			tickets = append(tickets, r.t)
			delete(g.reserved, d)
		}
	}
	clear(g.waiting)
	clear(g.lates)
	clear(g.byValue)
	clear(g.lines)
	g.freeRoom()
	g.mu.Unlock()
	for _, t := range tickets {
		g.Done(ctx, t)
	}
	return ds
}

// Due reports whether a waiting delivery may try again at the clock's now and has not
// been handed back to the engine yet (a test's probe of idleness asks it).
func (g *Gate) Due() bool { return g.q.Due() }

// Room blocks while MaxWaiting deliveries wait (the read loop then reads nothing), and
// returns false if ctx ended first.
func (g *Gate) Room(ctx context.Context) bool {
	for {
		g.mu.Lock()
		if len(g.waiting) < g.cfg.MaxWaiting {
			g.mu.Unlock()
			return true
		}
		if g.roomFree == nil {
			g.roomFree = make(chan struct{})
		}
		ch := g.roomFree
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Resumed blocks while a delivery whose wait ended waits for the room to start: the
// read loop then reads nothing, so that what a limit let through (a reserved start)
// starts on time rather than behind new reads. It returns false if ctx ended first.
func (g *Gate) Resumed(ctx context.Context) bool {
	g.mu.Lock()
	if g.resuming == 0 {
		g.mu.Unlock()
		return true
	}
	if g.resumed == nil {
		g.resumed = make(chan struct{})
	}
	ch := g.resumed
	g.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// freeRoom wakes Room when the waiting set has room. g.mu is held.
func (g *Gate) freeRoom() {
	if g.roomFree != nil && len(g.waiting) < g.cfg.MaxWaiting {
		close(g.roomFree)
		g.roomFree = nil
	}
}

// Late returns how many starts the gate gave up because they came later than their
// rate limit's slack (see SlackShare).
func (g *Gate) Late() int64 { return g.lateness.Load() }

// Admit lets d start under the mount's limits, returning the ticket it holds while it
// runs (give it to Done), or parks d to try again later and returns false: then d is
// the gate's until Resume is called with it.
//
// A start that comes later than its rate limits' slack after the start they let
// through (measured from before the take was sent, so a slow answer counts) is given
// up, its slots freed, and the delivery asks again at once; once it gave up MaxLate
// starts (counted until it starts, across its waits: a retake refused in between does
// not start the count again) it begins the next however late. So no window of a limit's
// period sees more than n + burst starts, and a host that is always late still starts
// its deliveries.
func (g *Gate) Admit(ctx context.Context, d *source.Delivery) (*Ticket, bool) {
	g.mu.Lock()
	if r, ok := g.reserved[d]; ok {
		delete(g.reserved, d)
		if r.by.IsZero() || g.lates[d] >= MaxLate || !g.cfg.Clock.Now().After(r.by) {
			g.started(d, r.t)
			g.mu.Unlock()
			return r.t, true
		}
		g.mu.Unlock()
		g.late(ctx, d, r.t)
	} else {
		g.mu.Unlock()
	}
	for {
		t, ok, again := g.admit(ctx, d)
		if !again {
			return t, ok
		}
	}
}

// late gives up a start of d that came too late: its slots are freed.
func (g *Gate) late(ctx context.Context, d *source.Delivery, t *Ticket) {
	g.lateness.Add(1)
	g.mu.Lock()
	g.lates[d]++
	g.mu.Unlock()
	if g.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		g.cfg.Logger.DebugContext(ctx, "settle: a delivery came late to the start its rate limit let through; it gives it up and asks again",
			slog.String(source.AttrMsgID, d.ID))
	}
	g.Done(ctx, t)
}

// admit asks the limits' store once for d: again when the start it took came late and d
// must ask again.
func (g *Gate) admit(ctx context.Context, d *source.Delivery) (t *Ticket, ok, again bool) {
	gates := make([]source.Gate, len(g.cfg.Limits))
	var slack time.Duration // the least of the rate limits' slacks; 0: no rate limit
	for i, l := range g.cfg.Limits {
		gt := source.Gate{Name: g.names[i]}
		if l.KeyFunc != nil {
			gt.Value = l.KeyFunc(d)
		}
		if l.Slots() {
			gt.Slots, gt.Lease = l.N, g.cfg.Lease
		} else {
			gt.Interval, gt.Burst = (l.Per+Slack(l.Per))/time.Duration(l.N), max(l.Burst, 1)
			if s := Slack(l.Per); slack == 0 || s < slack {
				slack = s
			}
		}
		gates[i] = gt
	}
	token := g.prefix + strconv.FormatUint(g.seq.Add(1), 36)
	sent := g.cfg.Clock.Now()
	take, err := g.cfg.Store.LimitTake(ctx, gates, token, Horizon)
	if err != nil {
		g.cfg.Logger.WarnContext(ctx, "settle: could not read the mount's flow limits; the delivery waits and asks again",
			slog.String(source.AttrMsgID, d.ID), slog.Any(source.AttrError, err), slog.Duration("wait", ErrorWait))
		g.park(ctx, d, ErrorWait, -1, WaitUnreachable, "flow limits unreachable", nil, "")
		return nil, false, false
	}
	t = &Ticket{}
	if take.Wait == 0 || take.Reserved {
		for _, gt := range gates {
			if gt.Slots == 0 {
				g.kick(gt.Name + "\x00" + gt.Value) // the next of its line asks now
			}
		}
		for _, gt := range gates {
			if gt.Slots > 0 {
				t.held = append(t.held, source.Held{Name: gt.Name, Token: token, Value: gt.Value})
			}
		}
		g.mu.Lock()
		if len(t.held) > 0 {
			g.held[t] = struct{}{} // renewed while it waits for its reserved start, and runs
		}
		if take.Wait == 0 {
			if slack > 0 && g.lates[d] < MaxLate && g.cfg.Clock.Now().Sub(sent) > slack {
				g.mu.Unlock()
				g.late(ctx, d, t) // the answer came back later than the slack
				return nil, false, true
			}
			g.started(d, t)
			g.mu.Unlock()
			return t, true, false
		}
		r := reservation{t: t}
		if slack > 0 {
			r.by = sent.Add(take.Wait + slack)
		}
		g.reserved[d] = r
		g.mu.Unlock()
	}
	gt := gates[take.Which]
	var slot []string
	reason := fmt.Sprintf("%s limit %s", kindOf(gt), g.names[take.Which])
	if gt.Value != "" {
		reason += fmt.Sprintf(" key %q", gt.Value)
	}
	// The wait counts from the answer's arrival: a reserved start may begin a round trip
	// late, never early (and no later than the slack after it, counted from the take's
	// sending).
	wait := take.Wait
	line := ""
	if gt.Slots > 0 {
		wait = min(wait, SlotPoll)
		slot = []string{g.names[take.Which] + "\x00" + gt.Value}
	} else if !take.Reserved {
		line = gt.Name + "\x00" + gt.Value
	}
	g.park(ctx, d, wait, take.Which, kindOf(gt), reason, slot, line)
	return nil, false, false
}

// started fills t's wait from d's record, once d starts. g.mu is held.
func (g *Gate) started(d *source.Delivery, t *Ticket) {
	delete(g.lates, d)
	if r, ok := g.waited[d]; ok {
		delete(g.waited, d)
		t.Kind, t.Reason, t.Waited = r.kind, r.reason, g.cfg.Clock.Now().Sub(r.since)
	}
}

// kindOf names a gate's kind for a wait's reason.
func kindOf(gt source.Gate) string {
	if gt.Slots > 0 {
		return WaitConcurrency
	}
	return WaitRate
}

// park keeps d waiting for wait (or, for a slot, until one is freed here; or, in a
// rate limit's line, until it heads the line and the line's wait ends), for limit
// which, for reason (of kind).
func (g *Gate) park(ctx context.Context, d *source.Delivery, wait time.Duration, which int, kind, reason string, slots []string, line string) {
	w := &waiter{d: d, slots: slots, which: which}
	g.mu.Lock()
	if _, ok := g.waited[d]; !ok {
		g.waited[d] = waitRecord{kind: kind, reason: reason, since: g.cfg.Clock.Now()}
		if g.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			g.cfg.Logger.DebugContext(ctx, "settle: delivery waits for its flow limit; it is not started and spends no attempt",
				slog.String(source.AttrMsgID, d.ID), slog.String("wait_reason", reason), slog.Duration("wait", wait))
		}
	}
	g.waiting[d] = w
	if g.stopped {
		g.mu.Unlock()
		return // nothing wakes it: the engine hands it back
	}
	for _, s := range slots {
		if g.byValue[s] == nil {
			g.byValue[s] = map[*waiter]struct{}{}
		}
		g.byValue[s][w] = struct{}{}
	}
	if line != "" {
		l := g.lines[line]
		if l == nil {
			l = &rateLine{}
			g.lines[line] = l
		}
		l.ws = append(l.ws, w)
		l.wait = wait
		g.armLine(line, l, wait)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.q.Schedule(wait, func() { g.wake(w) })
}

// armLine schedules l's head to ask again after wait, in place of any wake of the line
// scheduled before. g.mu is held.
func (g *Gate) armLine(key string, l *rateLine, wait time.Duration) {
	l.gen++
	gen := l.gen
	g.q.Schedule(wait, func() { g.wakeLine(key, gen) })
}

// kick lets the head of key's line ask at once: a delivery of its value took a start.
func (g *Gate) kick(key string) {
	g.mu.Lock()
	if l := g.lines[key]; l != nil && len(l.ws) > 0 {
		g.armLine(key, l, 0)
	}
	g.mu.Unlock()
}

// wakeLine hands the head of key's line back to the engine to ask again, unless a newer
// wake of the line was scheduled since (gen), and keeps the line armed after its wait in
// case that head never asks (it settled otherwise).
func (g *Gate) wakeLine(key string, gen uint64) {
	g.mu.Lock()
	l := g.lines[key]
	if l == nil || l.gen != gen {
		g.mu.Unlock()
		return
	}
	var w *waiter
	for len(l.ws) > 0 && w == nil {
		if g.waiting[l.ws[0].d] == l.ws[0] {
			w = l.ws[0]
		}
		l.ws[0] = nil
		l.ws = l.ws[1:]
	}
	if len(l.ws) == 0 {
		delete(g.lines, key)
	} else {
		g.armLine(key, l, max(l.wait, time.Millisecond))
	}
	g.mu.Unlock()
	if w != nil {
		g.wake(w)
	}
}

// wake hands w's delivery back to the engine, unless it was woken already.
func (g *Gate) wake(w *waiter) {
	g.mu.Lock()
	if g.waiting[w.d] != w {
		g.mu.Unlock()
		return
	}
	delete(g.waiting, w.d)
	for _, s := range w.slots {
		delete(g.byValue[s], w)
		if len(g.byValue[s]) == 0 {
			delete(g.byValue, s)
		}
	}
	g.freeRoom()
	g.resuming++
	g.mu.Unlock()
	ok := g.cfg.Resume(w.d)
	g.mu.Lock()
	g.resuming--
	if g.resuming == 0 && g.resumed != nil {
		close(g.resumed)
		g.resumed = nil
	}
	if !ok {
		g.waiting[w.d] = w // handed back at the stop
	}
	g.mu.Unlock()
}

// Done frees t's slots (nil: nothing held) and wakes a delivery of this process
// waiting for each of them.
func (g *Gate) Done(ctx context.Context, t *Ticket) {
	if t == nil || len(t.held) == 0 {
		return
	}
	g.mu.Lock()
	delete(g.held, t)
	g.mu.Unlock()
	if err := g.cfg.Store.LimitRelease(ctx, t.held); err != nil {
		g.cfg.Logger.WarnContext(ctx, "settle: could not free a concurrency slot; it comes free when its lease ends",
			slog.Any(source.AttrError, err), slog.Duration("lease", g.cfg.Lease))
	}
	var next []*waiter
	g.mu.Lock()
	for _, h := range t.held {
		for w := range g.byValue[h.Name+"\x00"+h.Value] {
			next = append(next, w)
			break
		}
	}
	g.mu.Unlock()
	for _, w := range next {
		g.q.Schedule(0, func() { g.wake(w) })
	}
}

// ReportEvery is how often a gate reports, while some of its deliveries wait, how many
// wait (source.WaitReporter), for operators.
const ReportEvery = time.Second

// renewLoop renews the held slots' leases every Lease/3, and reports the deliveries
// waiting every ReportEvery, until Close.
func (g *Gate) renewLoop(ctx context.Context) {
	every := min(ReportEvery, g.cfg.Lease/3)
	last := g.cfg.Clock.Now()
	for {
		t := g.cfg.Clock.NewTimer(every)
		select {
		case <-g.quit:
			t.Stop()
			if g.reported { // nothing of this process waits any more: say so now
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ErrorWait)
				g.reportWaiting(cctx, true)
				cancel()
			}
			return
		case <-t.C():
		}
		g.reportWaiting(ctx, false)
		if now := g.cfg.Clock.Now(); now.Sub(last) >= g.cfg.Lease/3 {
			last = now
			g.renew(ctx)
		}
	}
}

// reportWaiting records, where the Store keeps them (source.WaitReporter), how many of
// the mount's deliveries wait in this process for each limit, for operators: while some
// wait, and once more when none does (none, when closing). Each report holds for Lease;
// nothing is written while nothing waits.
func (g *Gate) reportWaiting(ctx context.Context, closing bool) {
	wr, ok := g.cfg.Store.(source.WaitReporter)
	if !ok {
		return
	}
	counts := make([]int, len(g.cfg.Limits))
	if !closing {
		g.mu.Lock()
		for _, w := range g.waiting {
			if w.which >= 0 && w.which < len(counts) {
				counts[w.which]++
			}
		}
		g.mu.Unlock()
	}
	some := slices.ContainsFunc(counts, func(n int) bool { return n > 0 })
	if !some && !g.reported {
		return
	}
	if err := wr.LimitWaiting(ctx, g.prefix, counts, g.cfg.Lease); err != nil {
		g.cfg.Logger.DebugContext(ctx, "settle: could not record how many deliveries wait for the flow limits (for operators)", slog.Any(source.AttrError, err))
		return
	}
	g.reported = some
}

// renew extends the leases of every slot held now, and warns of those lost.
func (g *Gate) renew(ctx context.Context) {
	g.mu.Lock()
	var held []source.Held
	for t := range g.held {
		held = append(held, t.held...)
	}
	g.mu.Unlock()
	if len(held) == 0 {
		return
	}
	lost, err := g.cfg.Store.LimitRenew(ctx, held, g.cfg.Lease)
	if err != nil {
		g.cfg.Logger.WarnContext(ctx, "settle: could not renew the leases of running deliveries' concurrency slots; they come free if no renewal succeeds within the lease",
			slog.Any(source.AttrError, err), slog.Duration("lease", g.cfg.Lease))
		return
	}
	for _, i := range lost {
		g.cfg.Logger.WarnContext(ctx, "settle: a running delivery lost its concurrency slot (its lease ended before a renewal): another delivery of its key may run beside it",
			slog.String("limit", held[i].Name), slog.String("limit_key", held[i].Value))
	}
}
