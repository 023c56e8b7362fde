// Package redisstream is settle's Redis stream transports: the consumer of a
// settle.Stream (retries are copies; its own pending entries re-read, its group
// recreated, oversized entries dead-lettered by reference, replies, trimming) and of a
// settle.ClaimingStream (retries left pending and claimed back), with the claimer that
// takes idle entries over. It is not for users: settle's public sources make them
// through New and NewClaiming, with the values they were given.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// Config is what a Stream or ClaimingStream mount was given.
type Config struct {
	// Batch is the most entries one XREADGROUP asks for.
	Batch int
	// Block is the longest one Fetch blocks.
	Block time.Duration
	// Client is the Redis client.
	Client redis.UniversalClient
	// Consumer names this consumer; empty: a name unique to the process.
	Consumer string
	// Group is the consumer group.
	Group string
	// Key is the stream.
	Key string
	// Reclaim is how long another consumer's entry stays idle before a Stream mount
	// takes it over (0: never). A ClaimingStream claims after its minIdle instead.
	Reclaim time.Duration
	// StartID is where a group the mount creates starts.
	StartID string
	// TrimKeep is how long entries every group acknowledged are kept; TrimOff keeps them all.
	TrimKeep time.Duration
	TrimOff  bool
}

// New returns the transport of one Stream mount of the stream c describes: retries are
// copies, and entries other consumers left idle for c.Reclaim are taken over.
func New(env source.Env, c Config) source.Transport {
	t := newStream(env, c)
	t.claim = newClaimer(t.claimStream(), "Reclaim(%s)", c.Reclaim, c.Block, false, nil) // retries are copies
	return t
}

// newStream returns a stream consumer with no claimer yet.
func newStream(env source.Env, c Config) *streamTransport {
	consumer := c.Consumer
	if consumer == "" {
		consumer = redisbase.DefaultConsumerName()
	}
	t := &streamTransport{
		cfg:      c,
		consumer: consumer,
		cursor:   "0",
		env:      env,
		inflight: map[string]bool{},
		rescan:   true,
	}
	t.Limits = redisbase.Limits{Client: c.Client, Group: c.Group, Key: c.Key, TestClock: env.TestClock}
	t.delays, t.parks = redisbase.DelaySetOf(env)
	t.dedup = redisbase.DedupOf(env, c.Client, keys.Dedup(c.Key, c.Group))
	return t
}

// claimStream is what a claimer of this consumer's group needs of it.
func (t *streamTransport) claimStream() claimStream {
	return claimStream{consumer: t.consumer, env: t.env, group: t.cfg.Group, key: t.cfg.Key, owner: t, rdb: t.cfg.Client}
}

// streamTransport is one mount's consumer on a stream.
type streamTransport struct {
	redisbase.Limits // the mount's flow limits, beside the stream (source.Limiter)

	cfg         Config
	claim       *claimer // takes idle pending entries over (Reclaim, ClaimingStream); nil: none
	consumer    string
	dedup       redisbase.Dedup    // settle.Dedupe's marks (keys.Dedup of the group)
	delays      redisbase.DelaySet // the mount's durable delay set, when parks
	env         source.Env
	garbledOnce sync.Once
	nextTrim    time.Time // when Fetch trims next (see trim); Fetch's goroutine only
	parks       bool
	// ahead is held read-locked by each read ahead (FetchAhead) and locked by a re-read
	// of own pending entries, so that a re-read never meets an entry a read ahead has
	// taken from Redis and not yet marked in flight (it would count a second delivery).
	ahead sync.RWMutex

	mu       sync.Mutex
	cursor   string          // where the next own-pending read starts
	fence    rereadFence     // entries settled while an own-pending re-read was out
	inflight map[string]bool // delivered here and not yet settled; true: taken over (see takeoverRoom)
	last     string          // the greatest entry id delivered here (see recreateGroup)
	orphaned map[string]bool // in flight here when the group was made again (see recreateGroup)
	rescan   bool            // re-read own pending entries before new ones
	rescans  uint64          // how many times a re-read was asked for (see readOwnPending)
}

func (t *streamTransport) Info() source.Info {
	return source.Info{
		Batch:        t.cfg.Batch,
		BatchesMoves: true,
		Block:        t.cfg.Block,
		// A re-read or claimed entry's attempt counts its unsettled deliveries.
		Caps:  source.Caps{CountsUnsettled: true, Parks: t.parks, Releases: true, Replies: true, RetryWithoutCap: source.ActionCopy},
		Group: t.cfg.Group,
		Key:   t.cfg.Key,
		Kind:  source.KindStream,
		Pool:  redisbase.PoolOf(t.cfg.Client, 1), // the blocking XREADGROUP
	}
}

func (t *streamTransport) Validate(p source.Policy) []error {
	var errs []error
	s := t.cfg
	if s.Client == nil {
		errs = append(errs, errors.New("stream: redis client is nil"))
	}
	if s.Key == "" {
		errs = append(errs, errors.New("stream: key is empty"))
	}
	if s.Group == "" {
		errs = append(errs, errors.New("stream: group is empty"))
	}
	if s.Batch < 1 {
		errs = append(errs, fmt.Errorf("Batch(%d): must be at least 1", s.Batch))
	}
	if s.Block <= 0 {
		errs = append(errs, fmt.Errorf("Block(%s): must be positive", s.Block))
	}
	if s.TrimKeep < 0 {
		errs = append(errs, fmt.Errorf("Trim(%s): keep must not be negative (NoTrim keeps every entry)", s.TrimKeep))
	}
	errs = append(errs, t.claim.validate()...)
	if p.DeadLetter != "" && p.DeadLetter == s.Key {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the stream the mount reads: dead letters would be read again", p.DeadLetter))
	}
	errs = append(errs, redisbase.DelaySetProblems(p, s.Client, "stream", s.Key)...)
	errs = append(errs, redisbase.ReplyProblems(p, s.Client, "stream", s.Key, s.Key)...)
	if _, cluster := s.Client.(*redis.ClusterClient); cluster && p.DeadLetter != "" {
		if err := keys.SameSlot(s.Key, p.DeadLetter); err != nil {
			errs = append(errs, fmt.Errorf("stream and DeadLetter must share a cluster slot (dead-lettering is one script): %w", err))
		}
	}
	return errs
}

// CheckKeys implements source.KeyChecker.
func (t *streamTransport) CheckKeys(ctx context.Context) error {
	if err := redisbase.CheckKeyTypes(ctx, t.cfg.Client, redisbase.MountKeyTypes(t.env.Policy, "stream")); err != nil {
		return fmt.Errorf("stream %q: %w", t.cfg.Key, err)
	}
	return nil
}

func (t *streamTransport) Open(ctx context.Context) error {
	if err := redisbase.CheckPerms(ctx, t.cfg.Client, t.perms()); err != nil {
		return err
	}
	if err := t.CheckKeys(ctx); err != nil {
		return err
	}
	if err := t.createGroup(ctx); err != nil {
		return err
	}
	t.claim.start(ctx)
	return nil
}

func (t *streamTransport) createGroup(ctx context.Context) error {
	s := t.cfg
	err := s.Client.XGroupCreateMkStream(ctx, s.Key, s.Group, s.StartID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("stream %q: create group %q: %w", s.Key, s.Group, err)
	}
	return nil
}

func (t *streamTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	wait = t.sweepDelays(ctx, wait)
	t.trim(ctx)
	t.mu.Lock()
	rescan := t.rescan
	t.mu.Unlock()
	if rescan && !t.claim.leavesRetries() {
		ds, err := t.readOwnPending(ctx, max)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
	}
	if t.claim != nil {
		ds, err := t.claim.fetch(ctx, max)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		wait = t.claim.bound(wait)
	}
	return t.read(ctx, ">", max, wait)
}

// FetchAhead reads new entries without blocking, beside Fetch (see source.ReadAhead):
// nothing while this consumer's own pending entries wait to be read again first.
func (t *streamTransport) FetchAhead(ctx context.Context, max int) ([]*source.Delivery, error) {
	t.ahead.RLock()
	defer t.ahead.RUnlock()
	t.mu.Lock()
	rescan := t.rescan
	t.mu.Unlock()
	if rescan && !t.claim.leavesRetries() {
		return nil, nil
	}
	msgs, err := t.xread(ctx, ">", max, -1)
	if err != nil {
		return nil, err
	}
	return t.deliveries(ctx, msgs, false), nil
}

// read reads entries after id (">" for new ones), blocking up to wait (-1: not at all).
//
// Redis times a block out only on its cron tick (see redisbase.MinServerBlock), so a wait that
// something shortened below the mount's Block (a delay coming due, a claim coming idle)
// blocks in Redis one tick less, and a wait shorter than a tick reads without blocking,
// then waits on the client: a due delay is swept within milliseconds of due rather than
// up to a tick late.
func (t *streamTransport) read(ctx context.Context, id string, max int, wait time.Duration) ([]*source.Delivery, error) {
	block := wait
	if wait >= 0 && wait < t.cfg.Block {
		block = wait - redisbase.MinServerBlock // Redis may answer up to a tick late: wake a tick early
	}
	short := wait >= 0 && block < redisbase.MinServerBlock
	if short {
		block = -1
	}
	msgs, err := t.xread(ctx, id, max, block)
	if err != nil {
		return nil, err
	}
	if short && len(msgs) == 0 {
		redisbase.PollWait(ctx, min(wait, redisbase.MinServerBlock))
		return nil, nil
	}
	return t.deliveries(ctx, msgs, false), nil
}

func (t *streamTransport) xread(ctx context.Context, id string, max int, wait time.Duration) ([]redis.XMessage, error) {
	s := t.cfg
	args := &redis.XReadGroupArgs{
		Block:    wait,
		Consumer: t.consumer,
		Count:    int64(max),
		Group:    s.Group,
		Streams:  []string{s.Key, id},
	}
	var cmd *redis.XStreamSliceCmd
	if id == ">" {
		// Not retried on a new connection: a lost reply must fail the read, so that the
		// entries it delivered are re-read from the pending list (see xreadOnce).
		cmd = xreadGroupOnce(ctx, s.Client, args)
	} else {
		cmd = s.Client.XReadGroup(ctx, args) // a re-read of own pending entries is safe to retry
	}
	res, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			// The stream or its group was deleted under us: make them again.
			if cerr := t.recreateGroup(ctx); cerr != nil {
				return nil, errors.Join(fmt.Errorf("stream %q: xreadgroup: %w", s.Key, err), cerr)
			}
			return nil, nil
		}
		t.markRescan()
		return nil, fmt.Errorf("stream %q: xreadgroup: %w", s.Key, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	msgs := res[0].Messages
	if len(msgs) > max {
		// A re-read of pending entries on miniredis ignores COUNT; never hand the engine
		// more than it has slots for (the rest stay pending and are read next).
		msgs = msgs[:max]
	}
	return msgs, nil
}

// deliveries turns entries into deliveries, skipping those already in flight here,
// acknowledging pending entries whose body was deleted from the stream and settling
// those too large to settle by a script (settleOversized). taken marks
// them taken over from the group's other consumers (see takeoverRoom).
func (t *streamTransport) deliveries(ctx context.Context, msgs []redis.XMessage, taken bool) []*source.Delivery {
	ds := make([]*source.Delivery, 0, len(msgs))
	all := make([]source.Delivery, len(msgs)) // one allocation for the batch, not one each
	var gone []string
	var big []redis.XMessage
	var last string // a read's ids come in order: its greatest is its last
	t.mu.Lock()
	for i, msg := range msgs {
		if _, busy := t.inflight[msg.ID]; busy {
			continue
		}
		if msg.Values == nil {
			gone = append(gone, msg.ID)
			continue
		}
		if oversized(msg) {
			big = append(big, msg)
			continue
		}
		t.inflight[msg.ID] = taken
		if taken {
			t.noteDelivered(msg.ID) // a claim's ids come in the order asked
		} else {
			last = msg.ID
		}
		all[i] = t.delivery(ctx, msg)
		all[i].TakenOver = taken
		ds = append(ds, &all[i])
	}
	if last != "" {
		t.noteDelivered(last)
	}
	t.mu.Unlock()
	t.settleOversized(ctx, big)
	if len(gone) > 0 {
		t.env.Logger.WarnContext(ctx, "settle: pending entries were deleted from the stream before they were settled; acknowledging them",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.cfg.Key), slog.Any("ids", gone))
		if err := t.cfg.Client.XAck(ctx, t.cfg.Key, t.cfg.Group, gone...).Err(); err != nil {
			t.env.Logger.ErrorContext(ctx, "settle: xack of deleted entries failed", slog.Any(source.AttrError, err))
		}
	}
	return ds
}

func (t *streamTransport) delivery(ctx context.Context, msg redis.XMessage) source.Delivery {
	payload, ok, headers := wire.FromRead(msg.Values)
	rc, valid := wire.ParseRetryCount(headers)
	if !valid {
		t.garbledOnce.Do(func() {
			t.env.Logger.WarnContext(ctx, "settle: garbled or out-of-range retry-count header read as 0 or MaxRetryCount (logged once per mount)",
				slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrMsgID, msg.ID), slog.String(wire.HeaderRetryCount, headers[wire.HeaderRetryCount]), slog.Int("read_as", rc))
		})
	}
	return source.Delivery{
		Attempt:    rc + 1,
		HasPayload: ok,
		Headers:    headers,
		ID:         msg.ID,
		Key:        t.cfg.Key,
		Payload:    payload,
		RetryCount: rc,
	}
}

// settledIDs forgets deliveries that were settled; on failure it asks for a re-read of
// own pending entries so that they are delivered again.
func (t *streamTransport) settledIDs(err error, ds ...*source.Delivery) {
	t.mu.Lock()
	reread := false
	for _, d := range ds {
		delete(t.inflight, d.ID)
		if t.orphaned[d.ID] {
			// The group made again may have delivered an entry of the same id here
			// while this one was in flight (and skipped it): read own pending again,
			// and let that re-read deliver it.
			reread = true
			delete(t.orphaned, d.ID)
			continue
		}
		if err == nil || errors.Is(err, script.ErrNotOwner) {
			t.fence.note(d.ID) // no longer ours to deliver
		}
	}
	// A failed write leaves the entry pending here: read it again. An entry another
	// consumer took over (script.ErrNotOwner) is not ours to read again.
	if reread || err != nil && !errors.Is(err, script.ErrNotOwner) {
		t.rescan, t.cursor = true, "0"
		t.rescans++
	}
	t.mu.Unlock()
}

// inflightIDs returns the ids of the entries in flight here.
func (t *streamTransport) inflightIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.inflight))
	for id := range t.inflight {
		ids = append(ids, id)
	}
	return ids
}

// takeoverRoom is how many entries a scan of the group's pending list may take over
// now: one, once the last taken over has settled (none before). An entry taken over
// runs alone (see source.Delivery.TakenOver), so that an entry that kills its process
// (each crash charging an attempt to every entry the process held) is charged its
// crashes alone: the others' attempts are not spent to the cap by crashes they only
// shared.
func (t *streamTransport) takeoverRoom() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 1
	for _, taken := range t.inflight {
		if taken {
			n--
		}
	}
	return n
}

// stillInflight returns those of ids still in flight here.
func (t *streamTransport) stillInflight(ids []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := t.inflight[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

func (t *streamTransport) markRescan() {
	t.mu.Lock()
	t.rescan, t.cursor = true, "0"
	t.rescans++
	t.mu.Unlock()
}

// Ack acknowledges the entries: one XACK, or, when some carry a dedup key
// (settle.Dedupe), one stream_done script call that writes their marks too.
func (t *streamTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	ids := t.unorphanedIDs(ds)
	var err error
	if len(ids) == 0 {
		// Only orphaned entries: nothing to acknowledge.
	} else if marks := t.dedup.Marks(ds); marks != nil {
		err = script.StreamDone(ctx, t.cfg.Client, t.cfg.Key, t.cfg.Group, ids, *marks)
	} else {
		err = t.cfg.Client.XAck(ctx, t.cfg.Key, t.cfg.Group, ids...).Err()
	}
	if err != nil {
		err = fmt.Errorf("stream %q: xack: %w", t.cfg.Key, err)
	}
	t.settledIDs(err, ds...)
	return err
}

// Completed reports which dedup keys the group completed within the mount's window
// (source.Deduper).
func (t *streamTransport) Completed(ctx context.Context, keys []string) ([]bool, error) {
	done, err := t.dedup.Completed(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", t.cfg.Key, err)
	}
	return done, nil
}

func (t *streamTransport) Close(context.Context) error {
	t.claim.close()
	return nil
}

// sweepDelays moves the due members of the mount's delay set into the stream, looping
// while full batches move, and returns how long the next read may block: no longer than
// until the earliest member still waiting comes due.
func (t *streamTransport) sweepDelays(ctx context.Context, wait time.Duration) time.Duration {
	if !t.parks {
		return wait
	}
	dz := t.delays
	t.mu.Lock()
	inflight := len(t.inflight) > 0
	t.mu.Unlock()
	wait, _ = dz.Sweep(ctx, wait, inflight, func(ctx context.Context, now int64) (script.SweepResult, error) {
		return script.Sweep(ctx, t.cfg.Client, dz.Key, t.cfg.Key, now, script.SweepBatch, wire.FieldPayload)
	})
	return wait
}

// Moves writes a batch of moves: retry copies (back to the stream) and dead letters (to
// their stream, bounded by DeadLetterMaxLen) in one stream_move script call per
// destination, parks in one pipeline of park script calls; each move all or nothing
// and fenced on its own (its entry must still be pending to this consumer). A delivery
// stays in flight until its call has answered.
func (t *streamTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	if kept, idx, all := t.withoutOrphaned(ms, errs); all {
		t.writeMoves(ctx, ms, errs)
	} else if len(kept) > 0 {
		keptErrs := make([]error, len(kept))
		t.writeMoves(ctx, kept, keptErrs)
		for k, i := range idx {
			errs[i] = keptErrs[k]
		}
	}
	// Forgotten as in flight only now that every write has answered.
	for i, m := range ms {
		t.settledIDs(errs[i], m.Delivery)
	}
	return errs
}

// writeMoves writes ms, setting each one's error in errs.
func (t *streamTransport) writeMoves(ctx context.Context, ms []source.Move, errs []error) {
	done := make([]bool, len(ms))
	batch := make([]script.Move, 0, len(ms))
	vals := make([]any, 0, 8*len(ms)) // every copy's fields, laid out one after another
	idx := make([]int, 0, len(ms))
	var parks []script.StreamPark
	var parkIdx []int
	var released []string
	releasedAt := map[string]int{}
	for i, m := range ms {
		switch m.Action {
		case source.ActionCopy, source.ActionDeadLetter:
		case source.ActionPark:
			parks, parkIdx = append(parks, t.park(m)), append(parkIdx, i)
			done[i] = true
		case source.ActionReply:
			errs[i] = t.reply(ctx, m)
			done[i] = true
		case source.ActionRelease:
			released = append(released, m.Delivery.ID)
			releasedAt[m.Delivery.ID] = i
			done[i] = true
		default:
			errs[i] = source.UnsupportedMove(source.KindStream, m)
			done[i] = true
		}
	}
	for i := range ms {
		if done[i] {
			continue
		}
		dest := streamDest(ms[i])
		batch, idx = batch[:0], idx[:0]
		for j := i; j < len(ms); j++ {
			if !done[j] && streamDest(ms[j]) == dest {
				d := ms[j].Delivery
				at := len(vals)
				vals = wire.AppendStreamValues(vals, d.Payload, ms[j].Headers)
				batch = append(batch, script.Move{ID: d.ID, Values: vals[at:len(vals):len(vals)]})
				idx = append(idx, j)
				done[j] = true
			}
		}
		key, maxLen := t.cfg.Key, int64(0)
		if dest != "" {
			key, maxLen = dest, t.env.Policy.DeadLetterMaxLen
		}
		for k, err := range script.StreamMoves(ctx, t.cfg.Client, key, t.cfg.Key, t.cfg.Group, t.consumer, maxLen, batch) {
			if err != nil {
				j := idx[k]
				if dest == "" {
					err = fmt.Errorf("stream %q: retry copy of %s: %w", t.cfg.Key, ms[j].Delivery.ID, err)
				} else {
					err = fmt.Errorf("stream %q: dead letter of %s to %q: %w", t.cfg.Key, ms[j].Delivery.ID, dest, err)
				}
				errs[j] = err
			}
		}
	}
	if len(released) > 0 {
		// A heartbeat must not touch them after the release (their idle time would be
		// reset, and the next consumer kept waiting a min-idle): the claimer's serial
		// lock orders the two, and they stop being in flight before it is let go.
		if t.claim != nil {
			t.claim.serial.Lock()
		}
		lost, err := script.Release(ctx, t.cfg.Client, t.cfg.Key, t.cfg.Group, t.consumer, released...)
		for _, id := range released {
			errs[releasedAt[id]] = err
		}
		for _, id := range lost {
			errs[releasedAt[id]] = fmt.Errorf("stream %q: hand back %s: %w", t.cfg.Key, id, script.ErrNotOwner)
		}
		for _, id := range released {
			t.settledIDs(errs[releasedAt[id]], ms[releasedAt[id]].Delivery)
		}
		if t.claim != nil {
			t.claim.serial.Unlock()
		}
	}
	if len(parks) > 0 {
		dz := t.delays
		for k, err := range script.Parks(ctx, t.cfg.Client, dz.Key, t.cfg.Key, t.cfg.Group, t.consumer, dz.TTL, dz.Now(), parks) {
			if err != nil {
				errs[parkIdx[k]] = fmt.Errorf("stream %q: park of %s in %q: %w", t.cfg.Key, ms[parkIdx[k]].Delivery.ID, dz.Key, err)
			}
		}
	}
}

// streamDest is where a copy or dead letter goes: "" for the stream itself (a retry
// copy), else the dead-letter stream.
func streamDest(m source.Move) string {
	if m.Action == source.ActionDeadLetter {
		return m.Dest
	}
	return ""
}

// park is the script's park of m: its retry copy (payload and the given headers) goes
// into the mount's delay set, due once m.Delay has passed on the Redis server's clock,
// and the original entry is acknowledged.
func (t *streamTransport) park(m source.Move) script.StreamPark {
	d := m.Delivery
	payload := d.Payload
	if !d.HasPayload {
		payload = nil
	}
	return script.StreamPark{Delay: m.Delay, ID: d.ID, Member: wire.DelayMember(d.ID, payload, m.Headers)}
}

// xreadOnce is an XREADGROUP that go-redis must not send twice. go-redis retries a
// command whose connection failed (EOF, reset) on a new connection; for a read of new
// entries (id ">") that is not safe: if Redis ran the first read and its reply was lost,
// the entries it delivered are pending at the consumer, and the retried read returns
// only newer ones, so those are never handled while the consumer runs. With NoRetry the
// failure reaches the transport, which then re-reads its own pending entries.
type xreadOnce struct{ *redis.XStreamSliceCmd }

// NoRetry keeps go-redis from running the read again after a connection failure.
func (xreadOnce) NoRetry() bool { return true }

// xreadGroupOnce runs XREADGROUP a once, without go-redis's retries (see xreadOnce).
func xreadGroupOnce(ctx context.Context, rdb redis.UniversalClient, a *redis.XReadGroupArgs) *redis.XStreamSliceCmd {
	// The command is built on a pipeline that is never run: the only exported way to get
	// it with its blocking read timeout set (BLOCK plus go-redis's margin).
	cmd := rdb.Pipeline().XReadGroup(ctx, a)
	_ = rdb.Process(ctx, xreadOnce{cmd})
	return cmd
}

// perms are the commands a stream consumer runs: reads, settlement scripts and what
// they run, the take-over of idle entries (claim, touch, prune), the trim of what every
// group acknowledged (unless NoTrim), the pause key, the dead letter and the delay set.
func (t *streamTransport) perms() []redisbase.Perm {
	key, group, c := t.cfg.Key, t.cfg.Group, t.consumer
	ps := append(redisbase.ScriptPerms(),
		redisbase.Perm{"XGROUP", "CREATE", key, group, "0", "MKSTREAM"},
		redisbase.Perm{"XREADGROUP", "GROUP", group, c, "COUNT", "1", "STREAMS", key, "0"},
		redisbase.Perm{"XACK", key, group, "0-1"},
		redisbase.Perm{"XADD", key, "*", "f", "v"},
		redisbase.Perm{"XPENDING", key, group, "-", "+", "1", c},
		redisbase.Perm{"XCLAIM", key, group, c, "0", "0-1"},
		redisbase.Perm{"TYPE", key},
		redisbase.Perm{"EXISTS", keys.Paused(key, group)},
	)
	if t.claim != nil {
		ps = append(ps, redisbase.Perm{"XAUTOCLAIM", key, group, c, "0", "0-0"}, redisbase.Perm{"XINFO", "CONSUMERS", key, group},
			redisbase.Perm{"XGROUP", "DELCONSUMER", key, group, c})
		gate := keys.Derived(key, "claim-scan:"+group)
		ps = append(ps, redisbase.Perm{"HGET", gate, "at"}, redisbase.Perm{"HSET", gate, "at", "0"}, redisbase.Perm{"PEXPIRE", gate, "1"})
	}
	if !t.cfg.TrimOff {
		ps = append(ps, redisbase.Perm{"XINFO", "GROUPS", key}, redisbase.Perm{"XPENDING", key, group}, redisbase.Perm{"XTRIM", key, "MINID", "0-1"})
	}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, redisbase.Perm{"XADD", dl, "*", "f", "v"}, redisbase.Perm{"TYPE", dl})
	}
	return append(ps, redisbase.DelayPerms(t.delays, t.parks)...)
}

func (t *streamTransport) ReplicaPerms(ctx context.Context) error {
	return redisbase.CheckReplicaPerms(ctx, t.cfg.Client, t.cfg.Key)
}

func (t *streamTransport) WaitReplicas(ctx context.Context, n int, timeout time.Duration) (int, error) {
	return redisbase.WaitReplicas(ctx, t.cfg.Client, t.cfg.Key, n, timeout)
}

func (t *streamTransport) Replicas(ctx context.Context) (int, error) {
	return redisbase.ConnectedReplicas(ctx, t.cfg.Client, t.cfg.Key)
}

// Paused reports whether the stream's group is paused: its control key
// (keys.Paused(stream, group)) exists. A ClaimingStream on the same group shares it.
func (t *streamTransport) Paused(ctx context.Context) (bool, error) {
	return redisbase.Paused(ctx, t.cfg.Client, t.cfg.Key, t.cfg.Group)
}
