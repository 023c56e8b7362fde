package settle

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

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

// PublishOption configures one Publish call: its headers (Header, Headers), and more
// for a stream.
type PublishOption func(*publishConfig)

type publishConfig struct {
	headers map[string]string
}

// Header sets one header of the published message. Names starting with HeaderPrefix,
// the payload field's name and the empty name are refused by the call.
func Header(name, value string) PublishOption {
	return func(c *publishConfig) {
		if c.headers == nil {
			c.headers = make(map[string]string, 2)
		}
		c.headers[name] = value
	}
}

// Headers sets every header of h on the published message (h is not kept); see Header.
func Headers(h map[string]string) PublishOption {
	return func(c *publishConfig) {
		if len(h) == 0 {
			return
		}
		if c.headers == nil {
			c.headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			c.headers[k] = v
		}
	}
}

func publishOptions(opts []PublishOption) publishConfig {
	var c publishConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
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
// id.
func (p *Publisher) PublishBytes(ctx context.Context, key string, payload []byte, opts ...PublishOption) (string, error) {
	headers, done := p.publishing(ctx, "stream", key, len(payload), opts)
	if err := checkHeaders(headers); err != nil {
		return "", published(done, "", fmt.Errorf("settle: publish to %q: %w", key, err))
	}
	if payload == nil {
		payload = []byte{} // nil would write no payload field
	}
	id, err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: wire.StreamValues(payload, headers)}).Result()
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
// list key.
func (p *Publisher) PublishListBytes(ctx context.Context, key string, payload []byte, opts ...PublishOption) error {
	headers, done := p.publishing(ctx, "list", key, len(payload), opts)
	if err := checkHeaders(headers); err != nil {
		return published(done, "", fmt.Errorf("settle: publish to list %q: %w", key, err))
	}
	if err := p.rdb.RPush(ctx, key, wire.Envelope(payload, headers)).Err(); err != nil {
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
// returns how many subscribers received it.
func (p *Publisher) PublishChannelBytes(ctx context.Context, channel string, payload []byte, opts ...PublishOption) (int64, error) {
	headers, done := p.publishing(ctx, "channel", channel, len(payload), opts)
	if err := checkHeaders(headers); err != nil {
		return 0, published(done, "", fmt.Errorf("settle: publish to channel %q: %w", channel, err))
	}
	n, err := p.rdb.Publish(ctx, channel, wire.Envelope(payload, headers)).Result()
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
