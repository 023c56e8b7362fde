package settle

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/flow"
	"github.com/settlekit/settle/internal/source"
)

// Log attribute keys: source's, shared by the engine, every transport and the inbox.
const (
	attrAction   = source.AttrAction
	attrAttempt  = source.AttrAttempt
	attrDedupKey = "dedup_key"
	attrDelay    = source.AttrDelay
	attrError    = source.AttrError
	attrGroup    = source.AttrGroup
	attrKey      = source.AttrKey
	attrMount    = source.AttrMount
	attrMsgID    = source.AttrMsgID
	attrMsgKey   = source.AttrMsgKey
	attrOutcome  = source.AttrOutcome
	attrReason   = source.AttrReason
)

// Source is where a mount's deliveries come from: Stream, and the sources of settle's
// subpackages. It is sealed: its method takes settle's internal types, so only settle's
// own packages implement it.
type Source interface {
	// Transport is for settle's own use and may change in any release.
	Transport(env source.Env) source.Transport
}

// engine is what the mounts of one App share: its clock, logger and OnSettled hook,
// its drain timeout, and the in-process delayed copies being written.
type engine struct {
	clock        clock.Clock
	delayed      sync.WaitGroup // in-process delayed copies being written; Run waits for them
	delaying     atomic.Int64   // how many of those are running (see TestProbe)
	drainTimeout time.Duration
	hooks        Hooks
	logger       *slog.Logger
	middleware   []Middleware // Config.Middleware: around every mount's own
	onSettled    func(ctx context.Context, s Settled)
	probe        *TestProbe  // Config.Test.Probe: nil in production
	testClock    clock.Clock // Config.Test.Clock: nil in production
}

// errAttemptsSpent is the error a delivery settled without running its handler carries:
// see spentByCrashes.
var errAttemptsSpent = errors.New("settle: the attempts were spent by deliveries that never settled (the consumer crashed, hung or could not settle); the handler was not run again")

// settleTimeout bounds one settlement write. Settlement writes do not depend on the
// run context: an ack is not lost because shutdown began.
const settleTimeout = 10 * time.Second

// mount is one recorded App.Mount, prepared by Validate.
type mount struct {
	cfg       mountConfig
	eng       *engine
	handler   Handler
	index     int
	info      source.Info
	logger    *slog.Logger
	name      string
	lost      atomic.Int64 // messages lost to a retry the transport cannot honour (ActionLose)
	onced     sync.Map     // reason -> *sync.Once, for warnings logged once per mount
	policy    source.Policy
	src       Source
	transport source.Transport
	wrapped   Handler

	slots   chan struct{} // one per delivery held (see run); nil until run
	reading atomic.Int64  // the slots the reads in progress have taken for what they may return
	// payloadMean is the mean payload size of recent reads, in bytes (0: none read yet):
	// what bounds Prefetch by PrefetchBytes (readRoom).
	payloadMean atomic.Int64
	ahead       readsAhead    // the reads of new messages beside the read loop's (see readsAhead)
	writes      writeContexts // the contexts of settlement writes other than acks
	copies      *copier       // queues retries and dead letters while Run runs; nil: each written in its handler
	due         *dueCopies    // writes in-process delays as they come due; nil: each on its own goroutine

	// What a TestProbe reads: the mount's state once run has made it (nil before), the
	// reads begun (each numbered by this count), the number of the last one that came
	// back empty, the deliveries read in all, and whether it waits out a pause.
	probed        atomic.Pointer[probeState]
	readsBegun    atomic.Uint64
	lastEmpty     atomic.Uint64
	delivered     atomic.Uint64
	waitingPaused atomic.Bool

	// settleFailed and settleOK tell the read loop that a settlement failed (its
	// delivery will be read again at once: back off first) or succeeded (reset the
	// backoff).
	settleFailed atomic.Bool
	settleOK     atomic.Bool

	dedup      source.Deduper    // the transport's completion marks when Dedupe is set, else nil
	dedupReads dedupReads        // the mark reads of concurrent deliveries, batched
	failures   failedSettles     // deliveries whose settlement failed here, by id
	keys       source.KeyChecker // the transport's key check (nil: it writes no other key)
	keysSaid   keyCheck          // the last answer of keys, reused for a second

	// settling is held for reading by each settlement write, from before its transport
	// call until its failures are recorded in failures; the read loop takes it for
	// writing before it hands out a delivery read again (see settlingBarrier).
	settling sync.RWMutex

	gate  atomic.Pointer[flow.Gate] // the mount's flow limits while run runs; nil: none
	order *ordering                 // Ordered's per-key queue while run runs; nil: not ordered
}

// prepare builds the mount's transport and policy. It runs once per mount.
func (m *mount) prepare(e *engine) {
	if m.transport != nil || m.src == nil {
		return
	}
	m.policy = source.Policy{
		DeadLetter:       m.cfg.deadLetter,
		DeadLetterMaxLen: m.cfg.deadLetterMaxLen,
		DedupWindow:      m.cfg.dedupe.windowOf(),
		Delay:            m.cfg.delay,
		FlowLimits:       len(m.cfg.limits) > 0,
		MaxAttempts:      m.cfg.maxAttempts,
		Ordered:          m.cfg.ordered,
		ReplyTo:          m.cfg.replyTo,
	}
	m.eng = e
	env := source.Env{Clock: e.clock, Logger: e.logger, Policy: m.policy, TestClock: e.testClock}
	m.name = m.cfg.name
	if m.name == "" {
		// A transport starts nothing until Open: a first one only names the mount, so
		// that the transport that runs logs under the name every other line uses.
		info := m.src.Transport(env).Info()
		m.name = string(info.Kind) + " " + info.Key
		if info.Group != "" {
			m.name += "/" + info.Group
		}
	}
	env.Mount = m.name
	if e.hooks.Event != nil {
		env.Event = m.emit
	}
	m.transport = m.src.Transport(env)
	m.info = m.transport.Info()
	m.logger = e.logger.With(slog.String(attrMount, m.name))
	m.keys, _ = m.transport.(source.KeyChecker)
	if m.cfg.dedupe != nil {
		m.dedup, _ = m.transport.(source.Deduper)
	}
	if _, ok := m.transport.(source.ReplicaWaiter); ok && m.cfg.replicas.set {
		m.transport = replicaTransport{Transport: m.transport, w: m.cfg.replicas, logger: m.logger}
	}
	m.wrapped = m.handler
	mws := append(slices.Clip(e.middleware), m.cfg.middleware...) // the App's outermost
	for i := len(mws) - 1; i >= 0; i-- {
		if m.wrapped != nil {
			m.wrapped = mws[i](m.wrapped)
		}
	}
}

// nilHandler reports whether h is nil or holds a nil func or pointer.
func nilHandler(h Handler) bool {
	if h == nil {
		return true
	}
	switch v := reflect.ValueOf(h); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Interface, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// newGate starts the gate of the mount's flow limits; resume hands it back a waiting
// delivery that may try again.
func (m *mount) newGate(ctx context.Context, resume func(d *source.Delivery) bool) *flow.Gate {
	limits := make([]flow.Limit, len(m.cfg.limits))
	for i, l := range m.cfg.limits {
		limits[i] = flow.Limit{Burst: l.burst, N: l.n, Per: l.per}
		if key := l.key; key != nil {
			limits[i].KeyFunc = func(d *source.Delivery) (v string) {
				defer func() {
					if r := recover(); r != nil {
						// Bad input must not crash the worker: the message is limited with
						// the values that have none.
						m.logger.WarnContext(ctx, "settle: a flow limit's key function panicked; the delivery is limited under the empty key",
							slog.String("limit", l.name), slog.String(attrMsgID, d.ID), slog.Any("panic", r))
						v = ""
					}
				}()
				return key(m.message(d))
			}
		}
	}
	g := flow.New(flow.Config{Clock: m.eng.clock, Lease: SlotLease, Limits: limits, Logger: m.logger,
		MaxWaiting: MaxWaiting, Resume: resume, Store: m.transport.(source.Limiter)})
	g.Start(context.WithoutCancel(ctx))
	return g
}

// validate returns every refusal of the mount.
func (m *mount) validate() []error {
	if m.src == nil {
		return []error{&ConfigError{Mount: fmt.Sprintf("#%d", m.index+1), Problem: "source is nil"}}
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, &ConfigError{Mount: m.name, Problem: fmt.Sprintf(format, args...)})
	}
	if nilHandler(m.handler) {
		add("handler is nil (a nil Handler, or a nil func given to HandlerFunc, Typed or Reply): every delivery would panic")
	}
	if b, ok := m.handler.(batchProblems); ok {
		for _, p := range b.problems(m.cfg.concurrency, m.cfg.timeout) {
			add("%s", p)
		}
	}
	if m.cfg.maxAttemptsSet && m.cfg.maxAttempts < 1 {
		add("MaxAttempts(%d): the cap must be at least 1 (leave the option out for no cap)", m.cfg.maxAttempts)
	}
	if m.cfg.concurrency < 1 {
		add("Concurrency(%d): must be at least 1", m.cfg.concurrency)
	}
	if m.cfg.prefetch < 0 {
		add("Prefetch(%d): must not be negative", m.cfg.prefetch)
	}
	if m.cfg.prefetchBytesSet && m.cfg.prefetchBytes < 1 {
		add("PrefetchBytes(%d): must be positive", m.cfg.prefetchBytes)
	}
	if m.cfg.deadLetterMaxLen < 0 {
		add("DeadLetterMaxLen(%d): must not be negative", m.cfg.deadLetterMaxLen)
	}
	if m.cfg.deadLetterMaxLen > 0 && m.info.Kind != source.KindStream {
		add("DeadLetterMaxLen(%d): only a stream's dead letters can be trimmed, not a %s source's", m.cfg.deadLetterMaxLen, m.info.Kind)
	}
	if m.cfg.timeout <= 0 {
		add("Timeout(%s): must be positive", m.cfg.timeout)
	}
	if m.cfg.backoff == nil {
		add("Backoff(nil): give a policy (a func returning 0 retries at once)")
	}
	if m.cfg.codec == nil {
		add("WithCodec(nil): give a codec")
	}
	if m.cfg.delay == nil {
		add("DelayIn(nil): give a strategy")
	}
	for _, p := range m.cfg.dedupe.problems(m.dedup != nil, m.info.Kind) {
		add("%s", p)
	}
	for _, p := range m.limitProblems() {
		add("%s", p)
	}
	for _, p := range m.orderedProblems() {
		add("%s", p)
	}
	for _, p := range m.cfg.replicas.problems(m.transport) {
		add("%s", p)
	}
	refused := m.transport.Validate(m.policy)
	for _, err := range refused {
		add("%v", err)
	}
	if len(refused) == 0 {
		// A transport that refused its settings said why in the words of the user's
		// options; its Info then follows from what was refused, and its
		// inconsistencies would say it again in the engine's words.
		for _, err := range capsProblems(m.info) {
			add("%v", err)
		}
	}
	for _, err := range delayProblems(m.cfg.delay, m.info) {
		add("%v", err)
	}
	for _, err := range m.replyProblems() {
		add("%v", err)
	}
	return errs
}

// capsProblems returns what is inconsistent in a transport's Info: the engine sends a
// transport only the moves its Caps allow, so they must agree with each other.
func capsProblems(info source.Info) []error {
	var errs []error
	c := info.Caps
	switch c.RetryWithoutCap {
	case source.ActionCopy, source.ActionPutBack, source.ActionLose:
		if c.DeliveryCounter {
			errs = append(errs, fmt.Errorf("%s transport: a delivery counter leaves retries pending, but RetryWithoutCap is %s", info.Kind, c.RetryWithoutCap))
		}
	case source.ActionLeave:
		if !c.DeliveryCounter || c.MinIdle <= 0 {
			errs = append(errs, fmt.Errorf("%s transport: RetryWithoutCap is leave without a delivery counter and a positive MinIdle", info.Kind))
		}
	default:
		errs = append(errs, fmt.Errorf("%s transport: RetryWithoutCap is %s; want copy, put_back, leave or lose", info.Kind, c.RetryWithoutCap))
	}
	return errs
}

// warnOnce logs a warning the first time reason comes up on the mount.
func (m *mount) warnOnce(ctx context.Context, reason string, msg string, attrs ...any) {
	o, _ := m.onced.LoadOrStore(reason, new(sync.Once))
	o.(*sync.Once).Do(func() { m.logger.WarnContext(ctx, msg, attrs...) })
}

// open opens the mount's source. An error that says the server could not be reached or
// is not ready (a refused or dropped connection, a server still loading its data; from an
// inbox, also a killed connection, a server starting, stopping or out of connections, a
// locked database) is logged and the open tried again after a backoff, until it succeeds or ctx is done: a consumer started while its
// Redis or database restarts comes up on its own, as a running one reconnects. Any other
// error (a key of the wrong type, a refused permission, a missing table) is returned at
// once: waiting would not fix it.
func (m *mount) open(ctx context.Context) error {
	var backoff time.Duration
	for {
		err := m.transport.Open(ctx)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		backoff = nextBackoff(backoff)
		m.logger.ErrorContext(ctx, "settle: open failed on an error that waiting may fix (the server unreachable, not ready or out of memory, the connection lost, the database locked); retrying", slog.Any(attrError, err), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
	}
}

// unreachable reports whether err says the server could not be reached or is not ready
// yet (loading, failing over, at maxmemory), rather than refusing what was asked.
func unreachable(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, driver.ErrBadConn), errors.As(err, &netErr):
		return true
	}
	// Redis's answers while it cannot serve yet.
	msg := err.Error()
	for _, prefix := range []string{"LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN ", "OOM "} {
		if strings.HasPrefix(msg, prefix) || strings.Contains(msg, ": "+prefix) {
			return true
		}
	}
	return false
}

// replicaTransport applies a transport's settlements, then waits for replicas.
type replicaTransport struct {
	source.Transport
	w      replicaWait
	logger *slog.Logger
}

// Open checks the permissions of the wait (its marker's SET and WAIT), as the transport
// checks its own, then opens the transport: first, since a transport that opened has
// started what only Close stops. It warns when the server reports fewer replicas than
// the wait asks for: every settlement would then be reported unconfirmed.
func (t replicaTransport) Open(ctx context.Context) error {
	w := t.Transport.(source.ReplicaWaiter)
	if err := w.ReplicaPerms(ctx); err != nil {
		return err
	}
	if err := t.Transport.Open(ctx); err != nil {
		return err
	}
	if got, err := w.Replicas(ctx); err == nil && got < t.w.n {
		t.logger.WarnContext(ctx, "settle: WaitReplicas asks for more replicas than the server reports: each settlement will be applied on the primary and reported unconfirmed after the timeout until enough replicas connect",
			slog.Int("want", t.w.n), slog.Int("connected", got), slog.Duration("timeout", t.w.timeout))
	}
	return nil
}

// Ack acks ds, then waits for the replicas.
func (t replicaTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	if err := t.Transport.Ack(ctx, ds); err != nil {
		return err // what the ack applied is not waited for: it is reported failed anyway
	}
	return t.wait(ctx)
}

// Moves applies ms, then waits for the replicas; a shortfall fails every move that
// applied.
func (t replicaTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := t.Transport.Moves(ctx, ms)
	applied := false
	for _, err := range errs {
		applied = applied || err == nil
	}
	if !applied {
		return errs
	}
	if err := t.wait(ctx); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

func (t replicaTransport) wait(ctx context.Context) error {
	got, err := t.Transport.(source.ReplicaWaiter).WaitReplicas(ctx, t.w.n, t.w.timeout)
	if err != nil || got < t.w.n {
		return &unconfirmed{got: got, want: t.w.n, timeout: t.w.timeout, err: err}
	}
	return nil
}

// unconfirmed is the error of a settlement applied on the primary that fewer replicas
// than WaitReplicas asks for confirmed in time (or whose wait failed): the message does
// not come back, but a failover may undo the settlement.
type unconfirmed struct {
	got, want int
	timeout   time.Duration
	err       error // the wait's own error, if it failed
}

func (e *unconfirmed) Error() string {
	if e.err != nil {
		return fmt.Sprintf("settlement applied on the primary; waiting for %d replicas failed: %v", e.want, e.err)
	}
	return fmt.Sprintf("settlement applied on the primary, confirmed by %d of %d replicas within %s", e.got, e.want, e.timeout)
}

func (e *unconfirmed) Unwrap() error { return e.err }

// delayProblems returns the refusals of a mount's delay strategy that hold for any
// source: a DurableZset needs a key, a TTL that is not negative, and a source that parks.
func delayProblems(strategy delayed.Strategy, info source.Info) []error {
	dz, ok := strategy.(delayed.DurableZset)
	if !ok {
		return nil
	}
	var errs []error
	if dz.Key == "" {
		errs = append(errs, errors.New("DelayIn(delayed.DurableZset{}): Key is empty; name the sorted set, e.g. \"{orders}:delayed\""))
	}
	if dz.TTL < 0 {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{TTL: %s}): TTL must not be negative (0: the set never expires)", dz.TTL))
	}
	if !info.Caps.Parks {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): a %s source cannot keep delays in a sorted set; use delayed.InProcess{}", dz.Key, info.Kind))
	}
	return errs
}

// problems returns the refusals of w for a mount whose transport is t.
func (w replicaWait) problems(t source.Transport) []string {
	if !w.set {
		return nil
	}
	var ps []string
	if w.n < 1 {
		ps = append(ps, fmt.Sprintf("WaitReplicas(%d, …): wait for at least 1 replica", w.n))
	}
	if w.timeout < time.Millisecond {
		ps = append(ps, fmt.Sprintf("WaitReplicas(…, %s): the timeout must be at least 1ms (WAIT 0 blocks until the replicas answer)", w.timeout))
	}
	if _, ok := t.(replicaTransport); !ok { // the engine wraps a transport that can wait
		ps = append(ps, fmt.Sprintf("WaitReplicas: only a stream or reliable list mount's settlements are Redis writes to wait for, not a %s source's", t.Info().Kind))
	}
	return ps
}

func nextBackoff(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return 100 * time.Millisecond
	case d >= 5*time.Second:
		return 5 * time.Second
	default:
		return 2 * d
	}
}

// emit reports a transport's event to the Event hook (see source.Env.Event).
func (m *mount) emit(ctx context.Context, e source.Event) {
	if h := m.eng.hooks.Event; h != nil {
		h(ctx, Event{Count: e.Count, Err: e.Err, Group: m.info.Group, Key: m.info.Key, Kind: EventKind(e.Kind), Mount: m.name, Transport: string(m.info.Kind)})
	}
}

// replyProblems returns the refusals of the mount's reply options.
func (m *mount) replyProblems() []error {
	switch {
	case m.cfg.replier != nil && m.cfg.replyTo == "":
		return []error{errors.New("ReplyVia without ReplyTo: say where replies go")}
	case m.cfg.replyTo != "" && m.cfg.replier == nil && !m.info.Caps.Replies:
		return []error{fmt.Errorf("ReplyTo(%q): a %s source cannot write replies atomically itself; give ReplyVia to publish them", m.cfg.replyTo, m.info.Kind)}
	}
	return nil
}

// warnPools warns, once per client at Run, when the mounts that share a Redis client hold
// at least as many connections while they wait for work (each a blocking read) as its
// pool has: every read then waits for a connection, settlements and heartbeats too, and
// they fail with pool timeouts. Run goes on (a pool that later grows, or mounts that are
// seldom idle together, may do); the README says how each mount uses connections.
func (a *App) warnPools(ctx context.Context) {
	type use struct {
		held, size int
		mounts     []string
	}
	var order []any
	uses := map[any]*use{}
	for _, m := range a.mounts {
		p := m.info.Pool
		if p.Client == nil || p.Size <= 0 || p.Held <= 0 {
			continue
		}
		u := uses[p.Client]
		if u == nil {
			u = &use{size: p.Size}
			uses[p.Client] = u
			order = append(order, p.Client)
		}
		u.held += p.Held
		u.mounts = append(u.mounts, m.name)
	}
	for _, c := range order {
		u := uses[c]
		if u.held < u.size {
			continue
		}
		a.eng.logger.WarnContext(ctx, fmt.Sprintf("settle: %d mounts share one Redis client whose pool has %d connections, and hold %d of them while they wait for work (a blocking read each): reads, settlements and heartbeats will wait for connections and fail with pool timeouts; give the client a PoolSize of at least %d (one connection for each mount's read and one for its writes), or the mounts clients of their own",
			len(u.mounts), u.size, u.held, 2*u.held),
			slog.Int("pool_size", u.size), slog.Int("held", u.held), slog.Any("mounts", u.mounts))
	}
}
