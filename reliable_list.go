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
// processing list are taken into the processing list of whichever live consumer of the
// list notices first (every consumer looks at start and every heartbeat TTL), once its
// heartbeat has expired, and handled there. A recovered item counts the delivery that
// never settled: it is taken with its retry count + 1, and one that arrives past the
// attempts cap is dead-lettered (or, with no dead letter declared, rejected with a
// warning) without running its handler again, so a message that kills its worker
// reaches the dead letter. A consumer restarted with the same Consumer name takes back
// its own processing list at start, with the same counting. Two live processes must not
// share a consumer name. A graceful stop moves what is left in the processing list back
// to the tail of the list, as it is.
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
		recovered:  map[string]int{},
		src:        s,
	}
	t.delays, t.parks = delaySetOf(env)
	return t
}

// errItemGone is why a settlement of a reliable list item did nothing: the item was no
// longer in the processing list.
var errItemGone = script.ErrItemGone

// reliableTransport is one mount's consumer on a reliable list.
type reliableTransport struct {
	consumer   string
	consumers  string   // the set of consumer names of the list
	delays     delaySet // the mount's durable delay set, when parks
	env        source.Env
	heartbeat  string // this consumer's heartbeat key
	keeper     *listKeeper
	parks      bool
	processing string // this consumer's processing list
	reader     envelopeReader
	seq        atomic.Uint64
	src        *ReliableListSource
	unsettled  atomic.Int64 // deliveries handed out and not settled yet

	mu       sync.Mutex
	inflight map[string]int // items handed out and not settled yet, by value
	// recovered counts the items taken from consumers that stopped (or from this
	// consumer's earlier life) and not delivered yet, by value: their delivery counts the
	// one that never settled.
	recovered map[string]int
	rescan    bool // re-read the processing list before moving new items
	// settledDuring counts the items settled while a re-read of the processing list is
	// in flight (nil otherwise): the re-read may have seen them before they left.
	settledDuring map[string]int
}

func (t *reliableTransport) Info() source.Info {
	return source.Info{
		Batch:        t.src.cfg.batch,
		BatchesMoves: true,
		Block:        listBlock(t.src.cfg.block),
		// A recovered item's attempt counts the delivery that never settled.
		Caps:  source.Caps{CountsUnsettled: true, Parks: t.parks, RetryWithoutCap: source.ActionPutBack},
		Group: t.consumer,
		Key:   t.src.key,
		Kind:  source.KindList,
	}
}

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

// Open takes back the consumer's own processing list (left by an earlier process with
// the same Consumer name), registers the consumer and starts its heartbeat, and
// recovers the processing lists of dead consumers.
func (t *reliableTransport) Open(ctx context.Context) error {
	t.keeper = newListKeeper(t)
	return t.keeper.start(ctx)
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

// took records values taken into the processing list by a recovery, to be delivered by
// the next reads, their delivery counting the one that never settled. When the recovery
// took only some of its batch (another consumer raced it), which of them came is not
// known: they are delivered unmarked (their retry count still counts the lost delivery,
// so the cap is reached one handler run later).
func (t *reliableTransport) took(values []string, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if all {
		for _, v := range values {
			t.recovered[v]++
		}
	}
	t.rescan = true
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
	recovered := make([]bool, len(vals))
	t.mu.Lock()
	for i, v := range vals {
		t.inflight[v]++
		if t.recovered[v] > 0 {
			recovered[i] = true
			if t.recovered[v]--; t.recovered[v] == 0 {
				delete(t.recovered, v)
			}
		}
	}
	t.mu.Unlock()
	ds := make([]*source.Delivery, len(vals))
	for i, v := range vals {
		payload, headers, ok, rc := t.reader.read(ctx, t.src.key, []byte(v))
		d := &source.Delivery{
			Attempt:    rc + 1,
			HasPayload: ok,
			Headers:    headers,
			ID:         t.consumer + ":" + strconv.FormatUint(t.seq.Add(1), 10),
			Key:        t.src.key,
			Payload:    payload,
			Raw:        v,
			RetryCount: rc,
		}
		if recovered[i] {
			d.RetryCount = max(rc-1, 0) // the header before the recovery counted the lost delivery
		}
		ds[i] = d
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

// Close stops the heartbeat and deletes it, moves whatever is left in the processing
// list (settlements that failed, items recovered and not handled yet) back to the tail
// of the list, as it is, and leaves the consumer set.
func (t *reliableTransport) Close(ctx context.Context) error {
	if t.keeper == nil {
		return nil
	}
	return t.keeper.close(ctx)
}
