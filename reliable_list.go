package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// ReliableListOption configures a ReliableList source.
type ReliableListOption interface {
	applyReliableList(*reliableListConfig)
}

type reliableListConfig struct {
	batch     int
	block     time.Duration
	consumer  string
	heartbeat time.Duration
}

func (o ReadOption) applyReliableList(c *reliableListConfig)     { o.set(&c.batch, &c.block) }
func (o ConsumerOption) applyReliableList(c *reliableListConfig) { c.consumer = o.name }

// DefaultHeartbeat is how long a reliable list consumer's heartbeat lives unless
// Heartbeat says otherwise.
const DefaultHeartbeat = 15 * time.Second

// HeartbeatOption sets a reliable list consumer's heartbeat; see Heartbeat.
type HeartbeatOption struct{ ttl time.Duration }

func (o HeartbeatOption) applyReliableList(c *reliableListConfig) { c.heartbeat = o.ttl }

// Heartbeat sets how long a reliable list consumer's heartbeat key lives (SET … PX ttl).
// The consumer refreshes it every ttl/3 and, every ttl, looks for consumers of the same
// list whose heartbeat has expired and recovers their processing lists. A dead
// consumer's items come back between ttl and 2×ttl after it died. It must be at least
// 100ms. Defaults to DefaultHeartbeat.
func Heartbeat(ttl time.Duration) HeartbeatOption { return HeartbeatOption{ttl: ttl} }

// ReliableListSource moves items from a Redis list into a per-consumer processing list
// while they are handled. Make one with ReliableList.
type ReliableListSource struct {
	cfg reliableListConfig
	key string
	rdb redis.UniversalClient
}

var _ Source = (*ReliableListSource)(nil)

// ReliableList returns a source that moves items from the head of the list key to the
// tail of the consumer's own processing list (LMOVE while items are there, BLMOVE, at
// most Block, when the list is idle), where each item stays until it is settled.
// Producers push to the tail of key (RPUSH, or Publisher.PublishList). Items are
// settle's envelope; a value that is not one is a bare payload with no headers.
//
// Settlements (each one atomic step, a Lua script over the processing list and the
// destination): Ack removes the item from the processing list (LREM). Retry without an
// attempts cap moves the item, as it is, back to the tail of the list. With a cap, a
// retry moves a copy (retry count + 1) there instead. A dead letter moves the item, with
// the dead-letter headers, to the list named by DeadLetter, which must share key's
// cluster slot (give both one {hash tag}). An in-process RetryAfter leaves the item in
// the processing list until the copy is written, so a crash loses nothing. With
// DelayIn(delayed.DurableZset{…}) a RetryAfter takes the item out of the processing
// list and parks its copy (retry count + 1) in that sorted set in one script, so the
// delay survives restarts and crashes, and every read first moves the due copies to the
// tail of the list; the set must share key's cluster slot too.
//
// Orphan recovery: each consumer keeps a heartbeat key alive (see Heartbeat) and is
// registered in a set of the list's consumers. When a consumer dies, the items in its
// processing list are moved back to the tail of the list once its heartbeat expires, by
// whichever consumer of the list notices first (every consumer looks at start and every
// heartbeat TTL). A recovered item counts as a delivery: it goes back with its retry
// count + 1, and at the attempts cap it is dead-lettered (or, with no dead letter
// declared, dropped with a warning) instead, so a message that kills its worker reaches
// the dead letter. A consumer restarted with the same Consumer name recovers its own
// processing list at start, with the same counting. Two live processes must not share
// a consumer name.
//
// The processing list, heartbeat and consumer set are named after key (see
// ProcessingList); they share its cluster slot.
func ReliableList(rdb redis.UniversalClient, key string, opts ...ReliableListOption) *ReliableListSource {
	cfg := reliableListConfig{batch: DefaultBatch, block: DefaultBlock, heartbeat: DefaultHeartbeat}
	for _, o := range opts {
		if o != nil {
			o.applyReliableList(&cfg)
		}
	}
	return &ReliableListSource{cfg: cfg, key: key, rdb: rdb}
}

// ProcessingList returns the name of the processing list of consumer on the reliable
// list key: key + ":processing:" + consumer when key has a {hash tag}, else
// "{" + key + "}:processing:" + consumer, so that it shares key's cluster slot.
func ProcessingList(key, consumer string) string { return keys.ListProcessing(key, consumer) }

// Transport is for settle's own use and may change in any release.
func (s *ReliableListSource) Transport(env source.Env) source.Transport {
	consumer := s.cfg.consumer
	if consumer == "" {
		consumer = defaultConsumerName()
	}
	t := &reliableTransport{
		consumer:   consumer,
		consumers:  keys.ListConsumers(s.key),
		env:        env,
		heartbeat:  keys.ListHeartbeat(s.key, consumer),
		inflight:   map[string]int{},
		processing: keys.ListProcessing(s.key, consumer),
		reader:     envelopeReader{logger: env.Logger, mount: env.Mount},
		src:        s,
	}
	t.delays, t.parks = delaySetOf(env)
	return t
}

// errItemGone is why a settlement of a reliable list item did nothing: the item was no
// longer in the processing list.
var errItemGone = script.ErrItemGone

// errConsumerLost is the error recorded on an item recovered from a dead consumer.
var errConsumerLost = errors.New("settle: the consumer handling this item stopped (heartbeat expired) before settling it")

// reliableTransport is one mount's consumer on a reliable list.
type reliableTransport struct {
	consumer   string
	consumers  string   // the set of consumer names of the list
	delays     delaySet // the mount's durable delay set, when parks
	env        source.Env
	heartbeat  string // this consumer's heartbeat key
	parks      bool
	processing string // this consumer's processing list
	reader     envelopeReader
	seq        atomic.Uint64
	src        *ReliableListSource
	unsettled  atomic.Int64 // deliveries handed out and not settled yet

	mu       sync.Mutex
	inflight map[string]int // items handed out and not settled yet, by value
	rescan   bool           // re-read the processing list before moving new items
	// settledDuring counts the items settled while a re-read of the processing list is
	// in flight (nil otherwise): the re-read may have seen them before they left.
	settledDuring map[string]int

	stop context.CancelFunc
	done chan struct{}
}

func (t *reliableTransport) Info() source.Info {
	return source.Info{
		Caps:  source.Caps{Parks: t.parks, RetryWithoutCap: source.ActionPutBack},
		Group: t.consumer,
		Key:   t.src.key,
		Kind:  source.KindList,
	}
}

// BatchSize is the most items one read asks for.
func (t *reliableTransport) BatchSize() int { return t.src.cfg.batch }

// BlockBound is the longest one read blocks.
func (t *reliableTransport) BlockBound() time.Duration { return listBlock(t.src.cfg.block) }

func (t *reliableTransport) Validate(p source.Policy) []error {
	s := t.src
	errs := validateList("reliable list", s.rdb, s.key, s.cfg.batch, s.cfg.block, p)
	if s.cfg.heartbeat < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("Heartbeat(%s): must be at least 100ms", s.cfg.heartbeat))
	}
	if t.consumer == "" {
		errs = append(errs, errors.New("Consumer(\"\"): give a name"))
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		ks := []string{s.key, t.processing, t.heartbeat, t.consumers}
		if p.DeadLetter != "" {
			ks = append(ks, p.DeadLetter)
		}
		if err := keys.SameSlot(ks...); err != nil {
			errs = append(errs, fmt.Errorf("a reliable list, its processing lists and its DeadLetter must share a cluster slot (each settlement is one script): %w", err))
		}
	}
	return append(errs, validateListDelay("reliable list", s.rdb, s.key, p, s.key, t.processing)...)
}

// Open registers the consumer, recovers its own processing list (left by an earlier
// process with the same Consumer name), starts its heartbeat and recovers the
// processing lists of dead consumers.
func (t *reliableTransport) Open(ctx context.Context) error {
	if _, err := t.recoverConsumer(ctx, t.consumer, false); err != nil {
		return err
	}
	if err := t.beat(ctx); err != nil {
		return err
	}
	t.recoverOthers(ctx)
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.stop, t.done = cancel, make(chan struct{})
	go t.keepAlive(hbCtx)
	return nil
}

// beat refreshes the heartbeat and the consumer's registration.
func (t *reliableTransport) beat(ctx context.Context) error {
	_, err := t.src.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, t.heartbeat, "1", t.src.cfg.heartbeat)
		p.SAdd(ctx, t.consumers, t.consumer)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reliable list %q: heartbeat: %w", t.src.key, err)
	}
	return nil
}

// keepAlive refreshes the heartbeat every TTL/3 and recovers dead consumers every TTL.
// Both run on the wall clock: the heartbeat expires on Redis's clock, which a test's
// fake clock does not move.
func (t *reliableTransport) keepAlive(ctx context.Context) {
	defer close(t.done)
	ttl := t.src.cfg.heartbeat
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		bctx, cancel := context.WithTimeout(ctx, ttl/3)
		if err := t.beat(bctx); err != nil && ctx.Err() == nil {
			t.env.Logger.ErrorContext(ctx, "settle: reliable list heartbeat failed: if it expires, other consumers recover this consumer's items",
				slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Any(attrError, err))
		}
		cancel()
		if n++; n%3 == 0 {
			t.recoverOthers(ctx)
		}
	}
}

// recoverOthers recovers the processing lists of the list's consumers whose heartbeat
// has expired.
func (t *reliableTransport) recoverOthers(ctx context.Context) {
	names, err := t.src.rdb.SMembers(ctx, t.consumers).Result()
	if err != nil {
		if ctx.Err() == nil {
			t.env.Logger.ErrorContext(ctx, "settle: reliable list: read consumers", slog.String(attrMount, t.env.Mount), slog.Any(attrError, err))
		}
		return
	}
	for _, name := range names {
		if name == t.consumer || ctx.Err() != nil {
			continue
		}
		if _, err := t.recoverConsumer(ctx, name, true); err != nil && ctx.Err() == nil {
			t.env.Logger.ErrorContext(ctx, "settle: reliable list: recovery failed", slog.String(attrMount, t.env.Mount),
				slog.String("consumer", name), slog.Any(attrError, err))
		}
	}
}

// recoverBatch bounds the items one recovery script moves.
const recoverBatch = 100

// recoverConsumer moves the items of name's processing list back to the list (retry
// count + 1), or to the dead letter at the cap, if name's heartbeat is absent (or
// regardless, when checkHeartbeat is false). It returns how many items it took.
func (t *reliableTransport) recoverConsumer(ctx context.Context, name string, checkHeartbeat bool) (int, error) {
	s := t.src
	hb, processing := keys.ListHeartbeat(s.key, name), keys.ListProcessing(s.key, name)
	dlq := t.env.Policy.DeadLetter
	if dlq == "" {
		dlq = s.key
	}
	check := "0"
	if checkHeartbeat {
		check = "1"
	}
	total := 0
	for range 10000 {
		if checkHeartbeat {
			alive, err := s.rdb.Exists(ctx, hb).Result()
			if err != nil {
				return total, fmt.Errorf("reliable list %q: heartbeat of %s: %w", s.key, name, err)
			}
			if alive == 1 {
				return total, nil
			}
		}
		items, err := s.rdb.LRange(ctx, processing, 0, recoverBatch-1).Result()
		if err != nil {
			return total, fmt.Errorf("reliable list %q: read processing list of %s: %w", s.key, name, err)
		}
		args := []any{check, name}
		dead, dropped := 0, 0
		for _, item := range items {
			where, value := t.recovered(ctx, name, item)
			switch where {
			case "dead":
				dead++
			case "drop":
				dropped++
			}
			args = append(args, item, where, value)
		}
		n, err := script.ListRecover.Run(ctx, s.rdb, []string{hb, processing, s.key, dlq, t.consumers}, args...).Int()
		if err != nil {
			return total, fmt.Errorf("reliable list %q: recover processing list of %s: %w", s.key, name, err)
		}
		if n < 0 {
			return total, nil
		}
		if n > 0 {
			t.env.Logger.WarnContext(ctx, "settle: recovered the items of a reliable list consumer that stopped without settling them",
				slog.String(attrMount, t.env.Mount), slog.String(attrKey, s.key), slog.String("consumer", name),
				slog.Int("count", n), slog.Int("dead_lettered", dead), slog.Int("dropped", dropped))
		}
		total += n
		if len(items) < recoverBatch || n == 0 {
			return total, nil
		}
	}
	return total, nil
}

// recovered decides what happens to an item recovered from a dead consumer: the crashed
// delivery counts as a failed attempt, decided like any other (back to the list with
// retry count + 1, or dead letter / drop at the cap). It returns the script's "where"
// and the value to push.
func (t *reliableTransport) recovered(ctx context.Context, consumer, item string) (where string, value string) {
	payload, headers, _, rc := t.reader.read(ctx, t.src.key, []byte(item))
	d := &source.Delivery{Attempt: rc + 1, Headers: headers, ID: "recovered:" + consumer, Key: t.src.key, Payload: payload, RetryCount: rc}
	o := Outcome{Kind: OutcomeRetry, Err: errConsumerLost}
	s := decide(o, d.Attempt, t.env.Policy, t.Info().Caps)
	switch s.Action {
	case source.ActionDeadLetter:
		return "dead", string(wire.Envelope(payload, deadLetterHeaders(d, s, o.Err)))
	case source.ActionReject:
		t.env.Logger.WarnContext(ctx, "settle: recovered item dropped: "+s.Reason,
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Int(attrAttempt, d.Attempt))
		return "drop", ""
	default:
		return "list", string(wire.Envelope(payload, withRetryCount(headers, d.Attempt)))
	}
}

func (t *reliableTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	wait = listBlock(wait)
	if t.parks {
		var err error
		if wait, err = t.sweepDelays(ctx, wait); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	rescan := t.rescan
	t.mu.Unlock()
	if rescan {
		vals, err := t.readOwnProcessing(ctx, max)
		if err != nil || len(vals) > 0 {
			return t.deliveries(ctx, vals), err
		}
	}
	vals, err := t.moveMany(ctx, max)
	if err != nil {
		t.markRescan()
	}
	if err != nil || len(vals) > 0 {
		return t.deliveries(ctx, vals), err
	}
	// Idle: block for one item, then take what else came with it.
	v, err := blockingPop(ctx, t.src.rdb, t.src.key, t.processing, wait)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		t.markRescan()
		return nil, fmt.Errorf("reliable list %q: blmove: %w", t.src.key, err)
	}
	vals = []string{v}
	if max > 1 {
		more, err := t.moveMany(ctx, max-1)
		vals = append(vals, more...)
		if err != nil {
			t.markRescan()
			t.env.Logger.WarnContext(ctx, "settle: reliable list: lmove after blmove failed",
				slog.String(attrMount, t.env.Mount), slog.Any(attrError, err))
		}
	}
	return t.deliveries(ctx, vals), nil
}

// moveMany moves up to n items to the processing list, one LMOVE each in one pipeline
// (not retried on a new connection: see stringOnce).
func (t *reliableTransport) moveMany(ctx context.Context, n int) ([]string, error) {
	s := t.src
	cmds := make([]*redis.StringCmd, 0, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range n {
			cmds = append(cmds, lmoveOnce(ctx, p, s.key, t.processing))
		}
		return nil
	})
	var vals []string
	for _, c := range cmds {
		if v, err := c.Result(); err == nil {
			vals = append(vals, v)
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return vals, fmt.Errorf("reliable list %q: lmove: %w", s.key, err)
	}
	return vals, nil
}

// readOwnProcessing returns up to max items of the consumer's processing list that are
// not in flight here: items moved here whose move's reply was lost, and items whose
// settlement failed. It re-reads again next time while it leaves some behind.
func (t *reliableTransport) readOwnProcessing(ctx context.Context, max int) ([]string, error) {
	t.mu.Lock()
	t.rescan = false
	t.settledDuring = map[string]int{}
	t.mu.Unlock()
	vals, err := t.src.rdb.LRange(ctx, t.processing, 0, -1).Result()
	t.mu.Lock()
	defer t.mu.Unlock()
	settled := t.settledDuring
	t.settledDuring = nil
	if err != nil {
		t.rescan = true
		return nil, fmt.Errorf("reliable list %q: read processing list: %w", t.src.key, err)
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
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Int("count", len(out)))
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
		if t.inflight[v]--; t.inflight[v] <= 0 {
			delete(t.inflight, v)
		}
		if err == nil && t.settledDuring != nil {
			t.settledDuring[v]++
		}
	}
	if err != nil && !errors.Is(err, errItemGone) {
		t.rescan = true
	}
}

func (t *reliableTransport) deliveries(ctx context.Context, vals []string) []*source.Delivery {
	t.mu.Lock()
	for _, v := range vals {
		t.inflight[v]++
	}
	t.mu.Unlock()
	ds := make([]*source.Delivery, len(vals))
	for i, v := range vals {
		payload, headers, ok, rc := t.reader.read(ctx, t.src.key, []byte(v))
		ds[i] = &source.Delivery{
			Attempt:    rc + 1,
			HasPayload: ok,
			Headers:    headers,
			ID:         t.consumer + ":" + strconv.FormatUint(t.seq.Add(1), 10),
			Key:        t.src.key,
			Payload:    payload,
			Raw:        v,
			RetryCount: rc,
		}
	}
	t.unsettled.Add(int64(len(ds)))
	return ds
}

// sweepDelays moves the due copies of the mount's delay set to the tail of the list and
// returns how long the next read may block (see delaySet.sweep).
func (t *reliableTransport) sweepDelays(ctx context.Context, wait time.Duration) (time.Duration, error) {
	wait, _, err := t.delays.sweep(ctx, wait, t.unsettled.Load() > 0, func(ctx context.Context, now int64) (script.SweepResult, error) {
		return script.SweepList(ctx, t.src.rdb, t.delays.Key, t.src.key, now, script.SweepBatch)
	})
	if err != nil {
		return wait, fmt.Errorf("reliable list %q: sweep delays from %q: %w", t.src.key, t.delays.Key, err)
	}
	return wait, nil
}

// Ack removes the items from the processing list.
func (t *reliableTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	t.unsettled.Add(-int64(len(ds)))
	cmds, err := t.src.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range ds {
			p.LRem(ctx, t.processing, 1, d.Raw.(string))
		}
		return nil
	})
	t.settled(err, ds...)
	if err != nil {
		return fmt.Errorf("reliable list %q: lrem: %w", t.src.key, err)
	}
	// An item another consumer recovered (this consumer's heartbeat lapsed) is not
	// acked here: it will be delivered again, and its settlement is reported failed.
	var gone *source.AckErrors
	for i, c := range cmds {
		if n, _ := c.(*redis.IntCmd).Result(); n == 0 {
			if gone == nil {
				gone = &source.AckErrors{Errs: make([]error, len(ds))}
			}
			gone.Errs[i] = fmt.Errorf("reliable list %q: ack of %s: %w", t.src.key, ds[i].ID, errItemGone)
		}
	}
	if gone != nil {
		return gone
	}
	return nil
}

// Park implements source.Parker: in one script, the item leaves the processing list and
// its copy (retry count + 1, in its envelope) goes into the mount's delay set, due once
// delay has passed on the Redis server's clock; nothing is written when the item is no
// longer in the processing list (another consumer recovered it).
func (t *reliableTransport) Park(ctx context.Context, d *source.Delivery, headers map[string]string, delay time.Duration) error {
	defer t.unsettled.Add(-1)
	if !t.parks {
		t.settled(nil, d) // nothing was written: the item stays until Close recovers it
		return fmt.Errorf("reliable list %q: park of %s: the mount has no durable delay set", t.src.key, d.ID)
	}
	member := valueMember(wire.Envelope(d.Payload, headers))
	_, parked, err := script.ParkValue(ctx, t.src.rdb, t.delays.Key, t.processing, d.Raw.(string), member, delay, t.delays.TTL, t.delays.now())
	switch {
	case err != nil:
		t.settled(err, d)
	case !parked:
		t.settled(errItemGone, d)
	default:
		t.settled(nil, d)
	}
	if err != nil {
		return fmt.Errorf("reliable list %q: park of %s in %q: %w", t.src.key, d.ID, t.delays.Key, err)
	}
	if !parked {
		return fmt.Errorf("reliable list %q: park of %s in %q: %w", t.src.key, d.ID, t.delays.Key, errItemGone)
	}
	return nil
}

// Close stops the heartbeat, deletes it and recovers whatever is left in the
// processing list (settlements that failed), then leaves the consumer set.
func (t *reliableTransport) Close(ctx context.Context) error {
	if t.stop != nil {
		t.stop()
		<-t.done
	}
	if err := t.src.rdb.Del(ctx, t.heartbeat).Err(); err != nil {
		return fmt.Errorf("reliable list %q: delete heartbeat: %w", t.src.key, err)
	}
	_, err := t.recoverConsumer(ctx, t.consumer, false)
	return err
}

var (
	_ source.Mover     = (*reliableTransport)(nil)
	_ source.Parker    = (*reliableTransport)(nil)
	_ source.PutBacker = (*reliableTransport)(nil)
)
