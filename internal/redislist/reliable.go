package redislist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// ReliableConfig is what a ReliableList mount was given.
type ReliableConfig struct {
	Config
	// Consumer names this consumer; empty: a name unique to the process.
	Consumer string
	// Heartbeat is how long the consumer's heartbeat lives without renewal.
	Heartbeat time.Duration
}

// NewReliable returns the transport of one mount of the reliable list c describes.
func NewReliable(env source.Env, c ReliableConfig) source.Transport {
	consumer := c.Consumer
	if consumer == "" {
		consumer = redisbase.DefaultConsumerName()
	}
	t := &reliableTransport{
		Limits:     redisbase.Limits{Client: c.Client, Key: c.Key, TestClock: env.TestClock},
		cfg:        c,
		consumer:   consumer,
		consumers:  keys.ListConsumers(c.Key),
		env:        env,
		heartbeat:  keys.ListHeartbeat(c.Key, consumer),
		ids:        redisbase.NewDeliveryIDs(consumer),
		inflight:   map[string]int{},
		lot:        newTakeoverLot(),
		processing: keys.ListProcessing(c.Key, consumer),
		reader:     redisbase.EnvelopeReader{Logger: env.Logger, Mount: env.Mount},
	}
	t.delays, t.parks = redisbase.DelaySetOf(env)
	t.dedup = redisbase.DedupOf(env, c.Client, keys.Dedup(c.Key, ""))
	return t
}

// errItemGone is why a settlement of a reliable list item did nothing: the item was no
// longer in the processing list.
var errItemGone = script.ErrItemGone

// reliableTransport is one mount's consumer on a reliable list.
type reliableTransport struct {
	redisbase.Limits // the mount's flow limits, beside the list (source.Limiter)

	cfg        ReliableConfig
	consumer   string
	consumers  string             // the set of consumer names of the list
	dedup      redisbase.Dedup    // settle.Dedupe's marks (keys.Dedup of the list)
	delays     redisbase.DelaySet // the mount's durable delay set, when parks
	env        source.Env
	heartbeat  string // this consumer's heartbeat key
	ids        *redisbase.DeliveryIDs
	keeper     *listKeeper
	parks      bool
	processing string // this consumer's processing list
	reader     redisbase.EnvelopeReader
	unsettled  atomic.Int64 // deliveries handed out and not settled yet
	// drained: the last Fetch found the list empty, so the next one blocks in Redis at
	// once (BLMOVE returns at once when an item came meanwhile) instead of first
	// calling the list_take script, which would find nothing. Touched only by Fetch.
	drained bool
	// ahead is held read-locked by each read ahead (FetchAhead) and locked by a re-read
	// of the processing list, so that the re-read never meets an item a read ahead moved
	// there and has not counted in flight yet (it would deliver it twice).
	ahead sync.RWMutex

	mu sync.Mutex
	// inflight counts by value the items a re-read of the processing list must not
	// deliver: handed out and not settled yet, or held for a recovery (see lotHolder).
	inflight map[string]int
	lot      takeoverLot // the items taken over and not settled yet
	rescan   bool        // re-read the processing list before moving new items
	// settledDuring counts the items settled while a re-read of the processing list is
	// in flight (nil otherwise): the re-read may have seen them before they left.
	settledDuring map[string]int
}

func (t *reliableTransport) Info() source.Info {
	return source.Info{
		Batch:        t.cfg.Batch,
		BatchesMoves: true,
		Block:        listBlock(t.cfg.Block),
		// A recovered item's attempt counts the delivery that never settled.
		Caps: source.Caps{CountsUnsettled: true, Parks: t.parks, Releases: true, Replies: true, RetryWithoutCap: source.ActionPutBack},
		Key:  t.cfg.Key,
		Kind: source.KindList,
		Pool: redisbase.PoolOf(t.cfg.Client, 1), // the blocking BLMOVE
	}
}

func (t *reliableTransport) Validate(p source.Policy) []error {
	s := t.cfg
	errs := validateList("reliable list", s.Client, s.Key, s.Batch, s.Block, p)
	if s.Heartbeat < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("Heartbeat(%s): must be at least 100ms", s.Heartbeat))
	}
	if t.consumer == "" {
		errs = append(errs, errors.New("Consumer(\"\"): give a name"))
	}
	if _, cluster := s.Client.(*redis.ClusterClient); cluster {
		ks := []string{s.Key, t.processing, t.heartbeat, t.consumers}
		if p.DeadLetter != "" {
			ks = append(ks, p.DeadLetter)
		}
		if err := keys.SameSlot(ks...); err != nil {
			errs = append(errs, fmt.Errorf("a reliable list, its processing lists and its DeadLetter must share a cluster slot (each settlement is one script): %w", err))
		}
	}
	errs = append(errs, redisbase.ReplyProblems(p, s.Client, "reliable list", s.Key, t.processing)...)
	return append(errs, redisbase.DelaySetProblems(p, s.Client, "reliable list", s.Key)...)
}

// Open reads the consumer's own processing list (left by an earlier process with the
// same Consumer name), registers the consumer, takes a first lot of what an earlier
// process or dead consumers left (see takeoverLot) and starts the heartbeat.
// CheckKeys implements source.KeyChecker.
func (t *reliableTransport) CheckKeys(ctx context.Context) error {
	if err := redisbase.CheckKeyTypes(ctx, t.cfg.Client, redisbase.MountKeyTypes(t.env.Policy, "list")); err != nil {
		return fmt.Errorf("reliable list %q: %w", t.cfg.Key, err)
	}
	return nil
}

func (t *reliableTransport) Open(ctx context.Context) error {
	if err := redisbase.CheckPerms(ctx, t.cfg.Client, t.perms()); err != nil {
		return err
	}
	if err := t.CheckKeys(ctx); err != nil {
		return err
	}
	t.keeper = &listKeeper{
		consumer:   t.consumer,
		consumers:  t.consumers,
		env:        t.env,
		heartbeat:  t.heartbeat,
		key:        t.cfg.Key,
		lots:       t,
		processing: t.processing,
		rdb:        t.cfg.Client,
		reader:     &t.reader,
		ttl:        t.cfg.Heartbeat,
		wake:       t.lot.wake,
	}
	return t.keeper.start(ctx)
}

func (t *reliableTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	wait = listBlock(wait)
	if t.parks {
		wait = t.sweepDelays(ctx, wait)
	}
	if ds := t.deliverTaken(ctx, max); len(ds) > 0 {
		return ds, nil
	}
	t.mu.Lock()
	rescan := t.rescan
	t.mu.Unlock()
	if rescan {
		vals, err := t.readOwnProcessing(ctx, max)
		if err == nil && len(vals) > 0 && len(vals) < max {
			// New items come with it: an item whose settlement keeps failing is read
			// again at every rescan, and must not keep the list's other items waiting.
			more, merr := t.moveMany(ctx, max-len(vals))
			if merr != nil {
				t.markRescan()
			}
			vals = append(vals, more...)
		}
		if err != nil || len(vals) > 0 {
			return t.deliveries(ctx, vals), err
		}
	}
	if !t.drained {
		vals, err := t.moveMany(ctx, max)
		if err != nil {
			t.markRescan()
		}
		t.drained = err == nil && len(vals) < max
		if err != nil || len(vals) > 0 {
			return t.deliveries(ctx, vals), err
		}
	}
	if ready, pending := t.takeoverPending(); pending {
		// A takeover goes on lot by lot: wait for the next lot rather than in Redis,
		// looking at the list again within redisbase.MinServerBlock.
		pollReady(ctx, ready, min(wait, redisbase.MinServerBlock))
		return t.deliverTaken(ctx, max), nil
	}
	// Idle: block for one item, then take what else came with it.
	v, err := blockingPop(ctx, t.cfg.Client, t.cfg.Key, t.processing, wait)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		t.markRescan()
		return nil, fmt.Errorf("reliable list %q: blmove: %w", t.cfg.Key, err)
	}
	t.drained = max == 1
	vals := []string{v}
	if max > 1 {
		more, err := t.moveMany(ctx, max-1)
		t.drained = err == nil && len(more) < max-1
		vals = append(vals, more...)
		if err != nil {
			t.markRescan()
			t.env.Logger.WarnContext(ctx, "settle: reliable list: take after blmove failed",
				slog.String(source.AttrMount, t.env.Mount), slog.Any(source.AttrError, err))
		}
	}
	return t.deliveries(ctx, vals), nil
}

// FetchAhead moves up to max new items to the processing list without blocking, beside
// Fetch (see source.ReadAhead): nothing while the processing list waits to be read again
// or a takeover goes on.
func (t *reliableTransport) FetchAhead(ctx context.Context, max int) ([]*source.Delivery, error) {
	t.ahead.RLock()
	defer t.ahead.RUnlock()
	t.mu.Lock()
	busy := t.rescan || t.lot.more || t.lot.outstanding() > 0
	t.mu.Unlock()
	if busy {
		return nil, nil
	}
	vals, err := t.moveMany(ctx, max)
	if err != nil {
		t.markRescan()
	}
	return t.deliveries(ctx, vals), err
}

// moveMany moves up to n items to the processing list, one list_take script call per
// script.MaxListTake (never sent twice: see script.ListTake).
func (t *reliableTransport) moveMany(ctx context.Context, n int) ([]string, error) {
	var vals []string
	for len(vals) < n {
		want := n - len(vals)
		items, err := script.ListTake(ctx, t.cfg.Client, t.cfg.Key, t.processing, want)
		if err != nil {
			return vals, fmt.Errorf("reliable list %q: %w", t.cfg.Key, err)
		}
		vals = append(vals, items...)
		if len(items) < min(want, script.MaxListTake) {
			break
		}
	}
	return vals, nil
}

// readOwnProcessing returns up to max items of the consumer's processing list that are
// not in flight here: items moved here whose move's reply was lost, and items whose
// settlement failed. It re-reads again next time while it leaves some behind.
func (t *reliableTransport) readOwnProcessing(ctx context.Context, max int) ([]string, error) {
	t.ahead.Lock() // no read ahead out meanwhile (see reliableTransport.ahead)
	defer t.ahead.Unlock()
	t.mu.Lock()
	t.rescan = false
	t.settledDuring = map[string]int{}
	t.mu.Unlock()
	vals, err := t.cfg.Client.LRange(ctx, t.processing, 0, -1).Result()
	t.mu.Lock()
	defer t.mu.Unlock()
	settled := t.settledDuring
	t.settledDuring = nil
	if err != nil {
		t.rescan = true
		return nil, fmt.Errorf("reliable list %q: read processing list: %w", t.cfg.Key, err)
	}
	seen := map[string]int{}
	var out []string
	for _, v := range vals {
		seen[v]++
		if seen[v] <= t.inflight[v] {
			continue
		}
		if seen[v] <= t.inflight[v]+settled[v] {
			// Settled since the read, or before it: look again next time to tell.
			t.rescan = true
			continue
		}
		if len(out) == max {
			t.rescan = true
			break
		}
		out = append(out, v)
	}
	if len(out) > 0 {
		t.env.Logger.WarnContext(ctx, "settle: reliable list: items in the processing list were not in flight (a move's reply or a settlement was lost); delivering them again",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.cfg.Key), slog.Int("count", len(out)))
	}
	return out, nil
}

// markRescan asks for a re-read of the processing list before the next move.
func (t *reliableTransport) markRescan() {
	t.mu.Lock()
	t.rescan = true
	t.mu.Unlock()
}

// settled forgets settled deliveries; a failure that may have left an item in the
// processing list asks for a re-read of it.
func (t *reliableTransport) settled(err error, ds ...*source.Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		v := d.Raw.(string)
		t.forget(v)
		t.settledTaken(d)
		if err == nil && t.settledDuring != nil {
			t.settledDuring[v]++
		}
	}
	if err != nil && !errors.Is(err, errItemGone) {
		t.rescan = true
	}
}

// deliveries hands out items moved to (or found in) the processing list, counted in
// flight until their settlement answers.
func (t *reliableTransport) deliveries(ctx context.Context, vals []string) []*source.Delivery {
	t.mu.Lock()
	for _, v := range vals {
		t.inflight[v]++
	}
	t.mu.Unlock()
	ds := make([]*source.Delivery, len(vals))
	for i, v := range vals {
		ds[i] = t.delivery(ctx, v, t.ids.Next())
	}
	t.unsettled.Add(int64(len(ds)))
	return ds
}

// delivery decodes the item v into a delivery named id.
func (t *reliableTransport) delivery(ctx context.Context, v, id string) *source.Delivery {
	payload, headers, ok, rc := t.reader.Read(ctx, t.cfg.Key, []byte(v))
	return &source.Delivery{
		Attempt:    rc + 1,
		HasPayload: ok,
		Headers:    headers,
		ID:         id,
		Key:        t.cfg.Key,
		Payload:    payload,
		Raw:        v,
		RetryCount: rc,
	}
}

// sweepDelays moves the due copies of the mount's delay set to the tail of the list and
// returns how long the next read may block (see sweepListDelays).
func (t *reliableTransport) sweepDelays(ctx context.Context, wait time.Duration) time.Duration {
	return sweepListDelays(ctx, t.cfg.Client, t.cfg.Key, t.delays, t.unsettled.Load() > 0, wait)
}

// Ack removes the items from the processing list, in one list_done script call (see
// script.ListDone) that also marks the dedup keys of those removed (settle.Dedupe).
func (t *reliableTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	t.unsettled.Add(-int64(len(ds)))
	items := make([]string, len(ds))
	for i, d := range ds {
		items[i] = d.Raw.(string)
	}
	removed, err := script.ListDone(ctx, t.cfg.Client, t.processing, items, t.dedup.Marks(ds))
	t.settled(err, ds...)
	if err != nil {
		return fmt.Errorf("reliable list %q: %w", t.cfg.Key, err)
	}
	// An item another consumer recovered (this consumer's heartbeat lapsed) is not
	// acked here: it will be delivered again, and its settlement is reported failed.
	var gone *source.AckErrors
	for i, ok := range removed {
		if !ok {
			if gone == nil {
				gone = &source.AckErrors{Errs: make([]error, len(ds))}
			}
			gone.Errs[i] = fmt.Errorf("reliable list %q: ack of %s: %w", t.cfg.Key, ds[i].ID, errItemGone)
		}
	}
	if gone != nil {
		return gone
	}
	return nil
}

// Completed reports which dedup keys the list's consumers completed within the mount's
// window (source.Deduper).
func (t *reliableTransport) Completed(ctx context.Context, keys []string) ([]bool, error) {
	done, err := t.dedup.Completed(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("reliable list %q: %w", t.cfg.Key, err)
	}
	return done, nil
}

// maxListMoveBatch bounds how many moves one list_move script call carries.
const maxListMoveBatch = 128

// Moves writes a batch of moves: retry copies and put-backs (to the tail of the list)
// and dead letters (to the tail of theirs) in one list_move script call per
// maxListMoveBatch moves, whatever their destinations; parks in one pipeline of park
// script calls. Each move takes its item out of the processing list and writes its value
// in one step, all or nothing on its own: a move whose item another consumer recovered
// meanwhile writes nothing and fails alone. A delivery stays in flight until its call
// has answered.
func (t *reliableTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	batch := make([]script.ListMove, 0, min(len(ms), maxListMoveBatch))
	idx := make([]int, 0, cap(batch))
	var parks []script.ValuePark
	var parkIdx []int
	flush := func() {
		for k, err := range script.ListMoves(ctx, t.cfg.Client, t.processing, batch) {
			errs[idx[k]] = err
		}
		batch, idx = batch[:0], idx[:0]
	}
	for i, m := range ms {
		item := m.Delivery.Raw.(string)
		mv := script.ListMove{Dest: t.cfg.Key, Item: item}
		switch m.Action {
		case source.ActionPutBack, source.ActionRelease:
			mv.Value = []byte(item)
		case source.ActionCopy:
			mv.Value = wire.Envelope(m.Delivery.Payload, m.Headers)
		case source.ActionDeadLetter:
			mv.Dest, mv.Value = m.Dest, wire.Envelope(m.Delivery.Payload, m.Headers)
		case source.ActionPark:
			member := redisbase.ValueMember(wire.Envelope(m.Delivery.Payload, m.Headers))
			parks, parkIdx = append(parks, script.ValuePark{Delay: m.Delay, Item: item, Member: member}), append(parkIdx, i)
			continue
		case source.ActionReply:
			errs[i] = t.reply(ctx, m)
			continue
		default:
			errs[i] = source.UnsupportedMove(source.KindList, m)
			continue
		}
		batch, idx = append(batch, mv), append(idx, i)
		if len(batch) == maxListMoveBatch {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if len(parks) > 0 {
		for k, err := range script.ValueParks(ctx, t.cfg.Client, t.delays.Key, t.processing, t.delays.TTL, t.delays.Now(), parks) {
			errs[parkIdx[k]] = err
		}
	}
	for i, m := range ms {
		errs[i] = t.moved(errs[i], m)
	}
	return errs
}

// moved forgets m's delivery as in flight once its move has answered with err, and
// returns the move's error for the engine.
func (t *reliableTransport) moved(err error, m source.Move) error {
	t.unsettled.Add(-1)
	t.settled(err, m.Delivery)
	if err == nil {
		return nil
	}
	what := "retry copy"
	switch m.Action {
	case source.ActionPutBack:
		what = "put back"
	case source.ActionRelease:
		what = "hand back"
	case source.ActionDeadLetter:
		what = fmt.Sprintf("dead letter to %q", m.Dest)
	case source.ActionPark:
		what = fmt.Sprintf("park in %q", t.delays.Key)
	case source.ActionReply:
		what = fmt.Sprintf("reply to %q", t.env.Policy.ReplyTo)
	}
	return fmt.Errorf("reliable list %q: %s of %s: %w", t.cfg.Key, what, m.Delivery.ID, err)
}

// Close stops the heartbeat and deletes it, moves whatever is left in the processing
// list (settlements that failed, items recovered and not handled yet) back to the tail
// of the list, as it is, and leaves the consumer set.
func (t *reliableTransport) Close(ctx context.Context) error {
	if t.keeper == nil {
		return nil
	}
	return t.keeper.close(ctx)
}

// perms are the commands a reliable list consumer runs: its moves into and out of its
// processing list (list_take, list_done, list_move), its heartbeat and consumer set, the recovery of dead consumers'
// lists, the pause key, the dead letter and the delay set.
func (t *reliableTransport) perms() []redisbase.Perm {
	key, proc := t.cfg.Key, t.processing
	ps := append(redisbase.ScriptPerms(),
		redisbase.Perm{"LMOVE", key, proc, "LEFT", "RIGHT"}, redisbase.Perm{"BLMOVE", key, proc, "LEFT", "RIGHT", "0"},
		redisbase.Perm{"LRANGE", key, "0", "-1"}, redisbase.Perm{"LTRIM", key, "0", "-1"}, redisbase.Perm{"RPUSH", proc, "v"},
		redisbase.Perm{"LREM", proc, "1", "v"}, redisbase.Perm{"LTRIM", proc, "0", "-1"}, redisbase.Perm{"LPUSH", proc, "v"},
		redisbase.Perm{"RPUSH", key, "v"}, redisbase.Perm{"LRANGE", proc, "0", "-1"}, redisbase.Perm{"LLEN", proc},
		redisbase.Perm{"TYPE", key}, redisbase.Perm{"MULTI"}, redisbase.Perm{"EXEC"},
		redisbase.Perm{"SET", t.heartbeat, "1", "PX", "1"}, redisbase.Perm{"EXISTS", t.heartbeat}, redisbase.Perm{"DEL", t.heartbeat},
		redisbase.Perm{"SADD", t.consumers, "c"}, redisbase.Perm{"SREM", t.consumers, "c"}, redisbase.Perm{"SMEMBERS", t.consumers},
		redisbase.Perm{"EXISTS", keys.Paused(key, "")},
	)
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, redisbase.Perm{"RPUSH", dl, "v"}, redisbase.Perm{"TYPE", dl})
	}
	return append(ps, redisbase.DelayPerms(t.delays, t.parks)...)
}

func (t *reliableTransport) ReplicaPerms(ctx context.Context) error {
	return redisbase.CheckReplicaPerms(ctx, t.cfg.Client, t.cfg.Key)
}

func (t *reliableTransport) WaitReplicas(ctx context.Context, n int, timeout time.Duration) (int, error) {
	return redisbase.WaitReplicas(ctx, t.cfg.Client, t.cfg.Key, n, timeout)
}

func (t *reliableTransport) Replicas(ctx context.Context) (int, error) {
	return redisbase.ConnectedReplicas(ctx, t.cfg.Client, t.cfg.Key)
}

// Paused reports whether the list is paused: its control key (keys.Paused(list, ""))
// exists; a List and a ReliableList on one key share it.
func (t *reliableTransport) Paused(ctx context.Context) (bool, error) {
	return redisbase.Paused(ctx, t.cfg.Client, t.cfg.Key, "")
}

// reply takes m's item out of the processing list, pushes its replies, each in settle's
// envelope, to the mount's ReplyTo list and marks its dedup key (settle.Dedupe), in one
// script (see list_reply.lua), fenced on the item still being there.
func (t *reliableTransport) reply(ctx context.Context, m source.Move) error {
	replies := redisbase.EncodeOutputs(m.Outputs, wire.Envelope)
	return script.ListReply(ctx, t.cfg.Client, t.processing, t.env.Policy.ReplyTo, m.Delivery.Raw.(string), replies, t.dedup.Marks([]*source.Delivery{m.Delivery}))
}
