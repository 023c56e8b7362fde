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
// dies loses them). A dead letter is pushed (RPUSH) to the list named by DeadLetter.
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
	return &listTransport{env: env, reader: envelopeReader{logger: env.Logger, mount: env.Mount}, src: s}
}

// listTransport is one mount's consumer on a plain list.
type listTransport struct {
	env    source.Env
	reader envelopeReader
	seq    atomic.Uint64
	src    *ListSource
}

func (t *listTransport) Info() source.Info {
	return source.Info{
		Caps: source.Caps{RetryWithoutCap: source.ActionLose},
		Key:  t.src.key,
		Kind: source.KindList,
	}
}

// BatchSize is the most items one read asks for.
func (t *listTransport) BatchSize() int { return t.src.cfg.batch }

// BlockBound is the longest one read blocks.
func (t *listTransport) BlockBound() time.Duration { return listBlock(t.src.cfg.block) }

func (t *listTransport) Validate(p source.Policy) []error {
	return validateList("list", t.src.rdb, t.src.key, t.src.cfg.batch, t.src.cfg.block, p)
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
	errs = append(errs, refuseDurableDelay(kind, p)...)
	return errs
}

// refuseDurableDelay refuses a durable delay strategy on a transport that cannot keep
// one yet (lists and channels), rather than silently keeping the delays in-process.
func refuseDurableDelay(kind string, p source.Policy) []error {
	if p.Delay != nil && p.Delay.Durable() {
		return []error{fmt.Errorf("DelayIn(%T): a %s cannot keep durable delays yet; use delayed.InProcess{} (the default)", p.Delay, kind)}
	}
	return nil
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
	vals, err := s.rdb.LPopCount(ctx, s.key, max).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list %q: lpop: %w", s.key, err)
	}
	if len(vals) == 0 {
		// Idle: block for one item, then take what else came with it.
		kv, err := s.rdb.BLPop(ctx, listBlock(wait), s.key).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %q: blpop: %w", s.key, err)
		}
		vals = kv[1:]
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
	return ds, nil
}

// Ack does nothing: the pop already took the items.
func (t *listTransport) Ack(context.Context, []*source.Delivery) error { return nil }

// Copy pushes the copy to the tail of the list; the pop already took the original.
func (t *listTransport) Copy(ctx context.Context, d *source.Delivery, headers map[string]string) error {
	if err := t.src.rdb.RPush(ctx, t.src.key, wire.Envelope(d.Payload, headers)).Err(); err != nil {
		return fmt.Errorf("list %q: retry copy of %s: rpush: %w", t.src.key, d.ID, err)
	}
	return nil
}

// DeadLetter pushes the dead letter to the tail of the list dest.
func (t *listTransport) DeadLetter(ctx context.Context, d *source.Delivery, dest string, headers map[string]string) error {
	if err := t.src.rdb.RPush(ctx, dest, wire.Envelope(d.Payload, headers)).Err(); err != nil {
		return fmt.Errorf("list %q: dead letter of %s to %q: rpush: %w", t.src.key, d.ID, dest, err)
	}
	return nil
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
