package settle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/wire"
)

// Publisher writes messages to Redis streams the way settle's consumers read them: the
// payload under the payload field, each header under its own field.
type Publisher struct {
	cfg publisherConfig
	rdb redis.UniversalClient
}

// NewPublisher returns a Publisher on the caller's client.
func NewPublisher(rdb redis.UniversalClient, opts ...PublisherOption) *Publisher {
	cfg := publisherConfig{codec: Msgpack}
	for _, o := range opts {
		if o != nil {
			o.applyPublisher(&cfg)
		}
	}
	if cfg.codec == nil {
		cfg.codec = Msgpack
	}
	return &Publisher{cfg: cfg, rdb: rdb}
}

// Publish encodes v with the publisher's codec and appends it to the stream key. It
// returns the new entry's id.
func (p *Publisher) Publish(ctx context.Context, key string, v any, opts ...PublishOption) (string, error) {
	payload, err := p.cfg.codec.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("settle: publish to %q: encode (%s): %w", key, p.cfg.codec.Name(), err)
	}
	return p.PublishBytes(ctx, key, payload, opts...)
}

// PublishBytes appends payload, as it is, to the stream key. It returns the new entry's
// id; a delayed publish (After, At with DelaySet) returns "" (the entry is written when
// the delay set's sweep delivers it). It takes Header, Headers, After, At, DelaySet,
// MaxLen and MinID. More than MaxHeaders headers are refused with ErrTooManyHeaders.
func (p *Publisher) PublishBytes(ctx context.Context, key string, payload []byte, opts ...PublishOption) (string, error) {
	c := publishOptions(opts)
	if err := c.Refuse("a stream", "Header", "After", "At", "DelaySet", "MaxLen", "MinID"); err != nil {
		return "", fmt.Errorf("settle: publish to %q: %w", key, err)
	}
	if err := checkStreamBounds(c); err != nil {
		return "", fmt.Errorf("settle: publish to %q: %w", key, err)
	}
	done := p.publishing(ctx, "stream", key, len(payload), &c)
	if err := errors.Join(checkHeaders(c.Headers), checkHeaderCount(c.Headers)); err != nil {
		return "", published(done, "", fmt.Errorf("settle: publish to %q: %w", key, err))
	}
	if payload == nil {
		payload = []byte{} // nil would write no payload field
	}
	if c.Delayed() || c.DelaySet != nil {
		member := wire.DelayMember(publishToken(), payload, c.Headers)
		return "", published(done, "", p.delay(ctx, c, key, "stream", member))
	}
	args := &redis.XAddArgs{Stream: key, Values: wire.StreamValues(payload, c.Headers), MaxLen: c.MaxLen, MinID: c.MinID}
	args.Approx = args.MaxLen > 0 // MinID trims exactly
	id, err := p.rdb.XAdd(ctx, args).Result()
	if err != nil {
		return "", published(done, "", fmt.Errorf("settle: publish to %q: xadd: %w", key, err))
	}
	return id, published(done, id, nil)
}

// PublishList encodes v with the publisher's codec and pushes it, in settle's envelope,
// to the tail of the list key (RPUSH), where List and ReliableList read it in order.
func (p *Publisher) PublishList(ctx context.Context, key string, v any, opts ...PublishOption) error {
	payload, err := p.cfg.codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("settle: publish to list %q: encode (%s): %w", key, p.cfg.codec.Name(), err)
	}
	return p.PublishListBytes(ctx, key, payload, opts...)
}

// PublishListBytes pushes payload, as it is, in settle's envelope to the tail of the
// list key. It takes Header, Headers, After, At and DelaySet.
func (p *Publisher) PublishListBytes(ctx context.Context, key string, payload []byte, opts ...PublishOption) error {
	c := publishOptions(opts)
	if err := c.Refuse("a list", "Header", "After", "At", "DelaySet"); err != nil {
		return fmt.Errorf("settle: publish to list %q: %w", key, err)
	}
	done := p.publishing(ctx, "list", key, len(payload), &c)
	if err := checkHeaders(c.Headers); err != nil {
		return published(done, "", fmt.Errorf("settle: publish to list %q: %w", key, err))
	}
	value := wire.Envelope(payload, c.Headers)
	if c.Delayed() || c.DelaySet != nil {
		return published(done, "", p.delay(ctx, c, key, "list", redisbase.ValueMember(value)))
	}
	if err := p.rdb.RPush(ctx, key, value).Err(); err != nil {
		return published(done, "", fmt.Errorf("settle: publish to list %q: rpush: %w", key, err))
	}
	return published(done, "", nil)
}

// PublishChannel encodes v with the publisher's codec and publishes it, in settle's
// envelope, to channel. It returns how many subscribers received it: a message nobody
// receives is gone (Pub/Sub keeps nothing).
func (p *Publisher) PublishChannel(ctx context.Context, channel string, v any, opts ...PublishOption) (int64, error) {
	payload, err := p.cfg.codec.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("settle: publish to channel %q: encode (%s): %w", channel, p.cfg.codec.Name(), err)
	}
	return p.PublishChannelBytes(ctx, channel, payload, opts...)
}

// PublishChannelBytes publishes payload, as it is, in settle's envelope to channel. It
// returns how many subscribers received it. It takes Header, Headers, After, At and
// DelaySet: a delayed message waits in the delay set of the PubSub mount that sweeps
// it to the channel (when it is due, the subscribers then listening receive it), and
// the count returned is 0.
func (p *Publisher) PublishChannelBytes(ctx context.Context, channel string, payload []byte, opts ...PublishOption) (int64, error) {
	c := publishOptions(opts)
	if err := c.Refuse("a channel", "Header", "After", "At", "DelaySet"); err != nil {
		return 0, fmt.Errorf("settle: publish to channel %q: %w", channel, err)
	}
	done := p.publishing(ctx, "channel", channel, len(payload), &c)
	if err := checkHeaders(c.Headers); err != nil {
		return 0, published(done, "", fmt.Errorf("settle: publish to channel %q: %w", channel, err))
	}
	value := wire.Envelope(payload, c.Headers)
	if c.Delayed() || c.DelaySet != nil {
		return 0, published(done, "", p.delay(ctx, c, "", "channel", redisbase.ValueMember(value)))
	}
	n, err := p.rdb.Publish(ctx, channel, value).Result()
	if err != nil {
		return 0, published(done, "", fmt.Errorf("settle: publish to channel %q: %w", channel, err))
	}
	return n, published(done, "", nil)
}

// checkHeaders refuses header names that would collide with settle's own fields.
func checkHeaders(headers map[string]string) error {
	for k := range headers {
		switch {
		case k == "":
			return fmt.Errorf("header with an empty name")
		case k == wire.FieldPayload:
			return fmt.Errorf("header %q is the payload field's name", k)
		case strings.HasPrefix(k, HeaderPrefix):
			return fmt.Errorf("header %q uses the reserved prefix %q", k, HeaderPrefix)
		}
	}
	return nil
}
