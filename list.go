package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// ListOption configures a List source.
type ListOption interface {
	applyList(*listConfig)
}

type listConfig struct {
	batch int
	block time.Duration
}

func (o ReadOption) applyList(c *listConfig) { o.set(&c.batch, &c.block) }

// ListSource pops items from a Redis list. Make one with List.
type ListSource struct {
	cfg listConfig
	key string
	rdb redis.UniversalClient
}

var _ Source = (*ListSource)(nil)

// List returns a source that pops items from the head of the list key: LPOP key count
// while items are there, and BLPOP (at most Block) when the list is idle. Producers push
// to the tail (RPUSH, or Publisher.PublishList), so the list is a FIFO queue.
//
// Items are settle's envelope (headers and payload, written by Publisher.PublishList);
// an item pushed by another client that is not an envelope is a bare payload with no
// headers.
//
// A plain list is at-most-once: the pop removes the item, so a process that dies while a
// handler runs loses it (ReliableList does not). Retry without an attempts cap cannot be
// honoured and loses the message, with a warning (logged once per mount; every loss is a
// Settled event with ActionLose). With a cap, a retry pushes a copy (retry count + 1) to
// the tail of the list, and an in-process RetryAfter does the same when its delay has
// passed (a process that stops first writes its waiting copies back at once; one that
// dies loses them). With DelayIn(delayed.DurableZset{…}) a RetryAfter parks the copy in
// that sorted set instead, where it survives restarts, and every read first pushes the
// due copies to the tail of the list (on Redis Cluster the list and the set must share a
// slot). A dead letter is pushed (RPUSH) to the list named by DeadLetter.
func List(rdb redis.UniversalClient, key string, opts ...ListOption) *ListSource {
	cfg := listConfig{batch: DefaultBatch, block: DefaultBlock}
	for _, o := range opts {
		if o != nil {
			o.applyList(&cfg)
		}
	}
	return &ListSource{cfg: cfg, key: key, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *ListSource) Transport(env source.Env) source.Transport {
	t := &listTransport{env: env, reader: envelopeReader{logger: env.Logger, mount: env.Mount}, src: s}
	t.delays, t.parks = delaySetOf(env)
	return t
}

// listTransport is one mount's consumer on a plain list.
type listTransport struct {
	delays    delaySet // the mount's durable delay set, when parks
	env       source.Env
	parks     bool
	reader    envelopeReader
	seq       atomic.Uint64
	src       *ListSource
	unsettled atomic.Int64 // deliveries handed out and not settled yet
}

func (t *listTransport) Info() source.Info {
	return source.Info{
		Batch: t.src.cfg.batch,
		Block: listBlock(t.src.cfg.block),
		Caps:  source.Caps{Parks: t.parks, RetryWithoutCap: source.ActionLose},
		Key:   t.src.key,
		Kind:  source.KindList,
	}
}

func (t *listTransport) Validate(p source.Policy) []error {
	errs := validateList("list", t.src.rdb, t.src.key, t.src.cfg.batch, t.src.cfg.block, p)
	return append(errs, validateListDelay("list", t.src.rdb, t.src.key, p, t.src.key)...)
}

// validateList checks what List and ReliableList share.
func validateList(kind string, rdb redis.UniversalClient, key string, batch int, block time.Duration, p source.Policy) []error {
	var errs []error
	if rdb == nil {
		errs = append(errs, fmt.Errorf("%s: redis client is nil", kind))
	}
	if key == "" {
		errs = append(errs, fmt.Errorf("%s: key is empty", kind))
	}
	if batch < 1 {
		errs = append(errs, fmt.Errorf("Batch(%d): must be at least 1", batch))
	}
	if block <= 0 {
		errs = append(errs, fmt.Errorf("Block(%s): must be positive", block))
	}
	if p.DeadLetter != "" && p.DeadLetter == key {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the list the mount reads: dead letters would be read again", p.DeadLetter))
	}
	return errs
}

// validateListDelay refuses a durable delay set a list cannot use. slotKeys are the
// keys the park and sweep scripts touch besides the set: on Redis Cluster they must all
// share its slot.
func validateListDelay(kind string, rdb redis.UniversalClient, key string, p source.Policy, slotKeys ...string) []error {
	dz, ok := p.Delay.(delayed.DurableZset)
	if !ok || dz.Key == "" {
		return nil // the App refuses an empty Key for every source
	}
	var errs []error
	if dz.Key == key {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the %s's", dz.Key, kind))
	}
	if p.DeadLetter != "" && dz.Key == p.DeadLetter {
		errs = append(errs, fmt.Errorf("DelayIn(delayed.DurableZset{Key: %q}): the delay set's key is the dead-letter list's", dz.Key))
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		if err := keys.SameSlot(append([]string{dz.Key}, slotKeys...)...); err != nil {
			errs = append(errs, fmt.Errorf("on Redis Cluster the %s and its delay set must share a slot (parking and sweeping are one Lua script each): %w", kind, err))
		}
	}
	return errs
}

// blockingPop waits up to wait for one value: BLPOP, or BLMOVE into dest when dest is
// not empty. go-redis gives both whole seconds only, so a wait under a second (a read
// bounded by a due delay) goes as a decimal timeout (Redis 6 and later take one), and a
// longer wait is cut to whole seconds (the next read sweeps and blocks for the rest). A
// sub-second read is bounded by the client's ReadTimeout, which must exceed it (the
// default, 3s, does). It returns redis.Nil when nothing came. A BLMOVE is never
// retried on a new connection (see blmoveOnce).
//
// A wait that is not whole seconds was shortened by a delay coming due (listBlock makes
// every other wait whole seconds). Redis times a block out only on its cron tick (see
// minServerBlock), so such a read blocks whole seconds ending at least a tick before due,
// and under that does not block in Redis at all: it waits on the client and returns
// redis.Nil, and the caller's next read sweeps the delay set again (callers pop without
// blocking before they call this).
func blockingPop(ctx context.Context, rdb redis.UniversalClient, key, dest string, wait time.Duration) (string, error) {
	if wait%time.Second != 0 {
		block := (wait - minServerBlock).Truncate(time.Second)
		if block < time.Second {
			pollWait(ctx, min(wait, minServerBlock))
			return "", redis.Nil
		}
		wait = block
	}
	if dest != "" {
		return blmoveOnce(ctx, rdb, key, dest, wait)
	}
	if wait >= time.Second {
		wait = wait.Truncate(time.Second)
		kv, err := rdb.BLPop(ctx, wait, key).Result()
		if err != nil {
			return "", err
		}
		return kv[1], nil
	}
	timeout := strconv.FormatFloat(max(wait, time.Millisecond).Seconds(), 'f', 3, 64)
	kv, err := rdb.Do(ctx, "BLPOP", key, timeout).StringSlice()
	if err != nil {
		return "", err
	}
	if len(kv) != 2 {
		return "", fmt.Errorf("blpop: %d values returned, want 2", len(kv))
	}
	return kv[1], nil
}

// listBlock rounds a block bound up to whole seconds, the resolution go-redis gives
// BLPOP and BLMOVE.
func listBlock(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

func (t *listTransport) Open(context.Context) error { return nil }

func (t *listTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	s := t.src
	wait = listBlock(wait)
	if t.parks {
		var err error
		if wait, err = t.sweepDelays(ctx, wait); err != nil {
			return nil, err
		}
	}
	vals, err := s.rdb.LPopCount(ctx, s.key, max).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list %q: lpop: %w", s.key, err)
	}
	if len(vals) == 0 {
		// Idle: block for one item, then take what else came with it.
		v, err := blockingPop(ctx, s.rdb, s.key, "", wait)
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %q: blpop: %w", s.key, err)
		}
		vals = []string{v}
		if max > 1 {
			more, err := s.rdb.LPopCount(ctx, s.key, max-1).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				// The items popped so far are delivered; the rest wait for the next read.
				t.env.Logger.WarnContext(ctx, "settle: list: lpop after blpop failed", slog.String(attrMount, t.env.Mount), slog.Any(attrError, err))
			}
			vals = append(vals, more...)
		}
	}
	ds := make([]*source.Delivery, len(vals))
	for i, v := range vals {
		payload, headers, ok, rc := t.reader.read(ctx, s.key, []byte(v))
		ds[i] = &source.Delivery{
			Attempt:    rc + 1,
			HasPayload: ok,
			Headers:    headers,
			ID:         strconv.FormatUint(t.seq.Add(1), 10),
			Key:        s.key,
			Payload:    payload,
			RetryCount: rc,
		}
	}
	t.unsettled.Add(int64(len(ds)))
	return ds, nil
}

// sweepDelays pushes the due copies of the mount's delay set to the tail of the list
// and returns how long the next read may block (see delaySet.sweep).
func (t *listTransport) sweepDelays(ctx context.Context, wait time.Duration) (time.Duration, error) {
	wait, _, err := t.delays.sweep(ctx, wait, t.unsettled.Load() > 0, func(ctx context.Context, now int64) (script.SweepResult, error) {
		return script.SweepList(ctx, t.src.rdb, t.delays.Key, t.src.key, now, script.SweepBatch)
	})
	if err != nil {
		return wait, fmt.Errorf("list %q: sweep delays from %q: %w", t.src.key, t.delays.Key, err)
	}
	return wait, nil
}

// Ack does nothing: the pop already took the items.
func (t *listTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	t.unsettled.Add(-int64(len(ds)))
	return nil
}

// Moves writes each move on its own (the pop already took the original, so there is
// nothing to complete): a retry copy is pushed to the tail of the list, a dead letter to
// the tail of its list, and a parked copy (retry count + 1, in its envelope) goes into
// the mount's delay set, due once its delay has passed on the Redis server's clock.
func (t *listTransport) Moves(ctx context.Context, ms []source.Move) []error {
	defer t.unsettled.Add(-int64(len(ms)))
	return source.EachMove(ms, func(m source.Move) error {
		d := m.Delivery
		var err error
		switch m.Action {
		case source.ActionCopy:
			if err = t.src.rdb.RPush(ctx, t.src.key, wire.Envelope(d.Payload, m.Headers)).Err(); err != nil {
				err = fmt.Errorf("list %q: retry copy of %s: rpush: %w", t.src.key, d.ID, err)
			}
		case source.ActionDeadLetter:
			if err = t.src.rdb.RPush(ctx, m.Dest, wire.Envelope(d.Payload, m.Headers)).Err(); err != nil {
				err = fmt.Errorf("list %q: dead letter of %s to %q: rpush: %w", t.src.key, d.ID, m.Dest, err)
			}
		case source.ActionPark:
			if err = t.delays.parkValue(ctx, t.src.rdb, m); err != nil {
				err = fmt.Errorf("list %q: park of %s in %q: %w", t.src.key, d.ID, t.delays.Key, err)
			}
		default:
			err = source.UnsupportedMove(source.KindList, m)
		}
		return err
	})
}

func (t *listTransport) Close(context.Context) error { return nil }

// PublishList encodes v with the publisher's codec and pushes it, in settle's envelope
// with the given headers (may be nil), to the tail of the list key (RPUSH), where List
// and ReliableList read it in order. Header names starting with HeaderPrefix are
// refused.
func (p *Publisher) PublishList(ctx context.Context, key string, v any, headers map[string]string) error {
	payload, err := p.cfg.codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("settle: publish to list %q: encode (%s): %w", key, p.cfg.codec.Name(), err)
	}
	return p.PublishListBytes(ctx, key, payload, headers)
}

// PublishListBytes pushes payload, as it is, in settle's envelope with the given headers
// (may be nil), to the tail of the list key.
func (p *Publisher) PublishListBytes(ctx context.Context, key string, payload []byte, headers map[string]string) error {
	if err := checkHeaders(headers); err != nil {
		return fmt.Errorf("settle: publish to list %q: %w", key, err)
	}
	if err := p.rdb.RPush(ctx, key, wire.Envelope(payload, headers)).Err(); err != nil {
		return fmt.Errorf("settle: publish to list %q: rpush: %w", key, err)
	}
	return nil
}
