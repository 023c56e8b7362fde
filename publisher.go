package settle

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/publish"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// Publisher writes messages to Redis streams the way settle's consumers read them: the
// payload under the payload field, each header under its own field.
type Publisher struct {
	cfg   publisherConfig
	parts sync.Map // partitioned stream name -> its partitions (int), as its meta key says
	rdb   redis.UniversalClient
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
// the delay set's sweep delivers it); with IdempotencyKey, a key published within its
// window returns its first entry's id and writes nothing. It takes Header, Headers,
// After, At, DelaySet, IdempotencyKey, IdempotencyWindow, Key, MaxLen and MinID. More
// than MaxHeaders headers are refused with ErrTooManyHeaders.
//
// With Key(k), a publish to a partitioned stream (see PartitionedStream) goes to the
// partition of k; one without Key is refused there with ErrNoKey.
func (p *Publisher) PublishBytes(ctx context.Context, key string, payload []byte, opts ...PublishOption) (string, error) {
	c := publishOptions(opts)
	if err := c.Refuse("a stream", "Header", "After", "At", "DelaySet", "IdempotencyKey", "IdempotencyWindow", "Key", "MaxLen", "MinID"); err != nil {
		return "", fmt.Errorf("settle: publish to %q: %w", key, err)
	}
	if err := errors.Join(checkStreamBounds(c), checkIdempotency(c)); err != nil {
		return "", fmt.Errorf("settle: publish to %q: %w", key, err)
	}
	done := p.publishing(ctx, "stream", key, len(payload), &c)
	if err := errors.Join(checkHeaders(c.Headers), checkHeaderCount(c.Headers)); err != nil {
		return "", published(done, "", fmt.Errorf("settle: publish to %q: %w", key, err))
	}
	name := key
	if c.Has("Key") {
		var err error
		if key, err = p.route(ctx, &c, name); err != nil {
			return "", published(done, "", fmt.Errorf("settle: publish to %q: %w", name, err))
		}
	}
	if payload == nil {
		payload = []byte{} // nil would write no payload field
	}
	if c.Delayed() || c.DelaySet != nil {
		member := wire.DelayMember(publishToken(), payload, c.Headers)
		return "", published(done, "", p.delay(ctx, c, key, "stream", member))
	}
	if c.IdempotencyKey != "" {
		id, err := p.publishOnce(ctx, key, payload, c)
		return id, published(done, id, err)
	}
	args := &redis.XAddArgs{Stream: key, Values: wire.StreamValues(payload, c.Headers), MaxLen: c.MaxLen, MinID: c.MinID}
	args.Approx = args.MaxLen > 0 // MinID trims exactly
	id, err := p.rdb.XAdd(ctx, args).Result()
	if err != nil && !c.Has("Key") && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		// name is no stream: a partitioned stream's meta key, perhaps.
		if n, _ := p.partitions(ctx, name); n > 0 {
			err = fmt.Errorf("%w: %q is a partitioned stream of %d partitions", ErrNoKey, name, n)
			return "", published(done, "", fmt.Errorf("settle: publish to %q: %w", name, err))
		}
	}
	if err != nil {
		return "", published(done, "", fmt.Errorf("settle: publish to %q: xadd: %w", key, err))
	}
	return id, published(done, id, nil)
}

// route returns the stream a keyed publish to name goes to: the partition of c.Key when
// name is a partitioned stream, else name itself; c's headers get HeaderKey, and its
// delay set (if any) the partition's.
func (p *Publisher) route(ctx context.Context, c *publish.Config, name string) (string, error) {
	if c.Headers == nil {
		c.Headers = make(map[string]string, 1)
	}
	c.Headers[HeaderKey] = c.Key
	n, err := p.partitions(ctx, name)
	switch {
	case err != nil:
		return name, err
	case n < 0:
		return name, fmt.Errorf("%w: %q: start its consumers first (a mount creates its stream or records its partitions), or record a partitioned stream's with PartitionedStreamSource.Declare", ErrNoStream, name)
	case n == 0:
		return name, nil
	}
	i := keys.PartitionFor(c.Key, n)
	if c.DelaySet != nil && c.DelaySet.Key != "" {
		dz := *c.DelaySet
		dz.Key = keys.InPartition(name, i, dz.Key)
		c.DelaySet = &dz
	}
	return keys.Partition(name, i), nil
}

// partitions returns how many partitions the partitioned stream name has, as its meta
// key says (remembered once read), 0 when name is a plain stream (a key of another
// type), or -1 when there is no key name yet.
func (p *Publisher) partitions(ctx context.Context, name string) (int, error) {
	if n, ok := p.parts.Load(name); ok {
		return n.(int), nil
	}
	n, err := p.rdb.HGet(ctx, name, "partitions").Int()
	switch {
	case errors.Is(err, redis.Nil):
		return -1, nil // nothing there yet: not remembered, a mount may make it
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		n = 0 // a plain stream (or another key): keyed publishes go to it
	case err != nil:
		return 0, fmt.Errorf("read partitions of %q: %w", name, err)
	}
	p.parts.Store(name, n)
	return n, nil
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

// PublisherOption configures a Publisher.
type PublisherOption interface {
	applyPublisher(*publisherConfig)
}

// publisherConfig is what a Publisher was given.
type publisherConfig struct {
	codec Codec
	hook  PublishHook
}

// MaxHeaders is the most headers a message published to a stream may carry. A stream
// entry holds each header in a field of its own, and settle's Lua scripts write every
// retry copy, parked copy and dead letter with one XADD, to which Lua hands only so
// many values (about 8,000 on Redis, 5,100 on miniredis); the limit leaves room for the
// payload and settle's own headers. Lists and channels carry headers inside one value
// and have no such limit. A stream entry another client wrote with more fields than
// settle can write back is dead-lettered by reference (see Stream).
const MaxHeaders = 1900

// ErrTooManyHeaders is the error of a stream publish with more than MaxHeaders headers:
// nothing was written.
var ErrTooManyHeaders = errors.New("settle: more headers than MaxHeaders")

// ErrNoStream is the error of a publish with Key to a name that holds nothing yet: a
// keyed message goes to a partition when name is a partitioned stream, to name when it
// is a plain stream, and which it is is not known until a mount (or Declare) made it.
var ErrNoStream = errors.New("settle: publish with Key(k) to a stream that does not exist yet")

// ErrNoKey is the error of a publish without Key to a partitioned stream: its partition
// is chosen by the message's key, and a message without one would have no order to keep.
var ErrNoKey = errors.New("settle: publish to a partitioned stream without Key(k)")

// checkHeaderCount refuses more than MaxHeaders headers.
func checkHeaderCount(headers map[string]string) error {
	if len(headers) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d (each is a stream field, and settle's scripts write an entry's fields in one call)", ErrTooManyHeaders, len(headers), MaxHeaders)
	}
	return nil
}

// PublishHook observes a Publisher's writes (and an inbox's: settle/inbox's
// WithPublishHook): called before each one, it may add headers to the message (a trace
// context, say, so that no call site changes) and returns a function the Publisher
// calls with the write's result, or nil.
type PublishHook func(ctx context.Context, p *Publishing) (done func(id string, err error))

// Publishing describes one publish, for a PublishHook.
type Publishing struct {
	// Headers are the message's headers (never nil): the hook may add its own. Names
	// that start with HeaderPrefix are refused, as from a caller.
	Headers map[string]string
	// Key is the stream or list key, or the channel, written to (an inbox's table: see
	// settle/inbox's WithPublishHook).
	Key string
	// Kind is what is written: "stream", "list", "channel" or "table".
	Kind string
	// Size is the payload's length in bytes.
	Size int
}

// WithPublishHook makes the Publisher call h before each write (see PublishHook).
func WithPublishHook(h PublishHook) PublisherOption { return publishHookOption{h} }

type publishHookOption struct{ h PublishHook }

func (o publishHookOption) applyPublisher(c *publisherConfig) { c.hook = o.h }

// publishing lets the Publisher's hook, if any, add its headers to c's for one publish
// to key, of kind, and returns the hook's completion (nil without a hook).
func (p *Publisher) publishing(ctx context.Context, kind, key string, size int, c *publish.Config) func(id string, err error) {
	if p.cfg.hook == nil {
		return nil
	}
	if c.Headers == nil {
		c.Headers = make(map[string]string, 2)
	}
	return p.cfg.hook(ctx, &Publishing{Headers: c.Headers, Key: key, Kind: kind, Size: size})
}

// published reports a write's result to the hook's completion, if any, and returns err.
func published(done func(id string, err error), id string, err error) error {
	if done != nil {
		done(id, err)
	}
	return err
}

// PublishOption configures one publish call, of a Publisher (streams, lists, channels)
// or of an inbox (inbox.Inbox.Publish and its family). An option that does not apply
// to what is published (MaxLen on a channel, say) is refused by the call with an error
// naming it, never ignored.
type PublishOption interface {
	applyPublish(*publish.Config)
}

// publishOptionFunc adapts a function to a PublishOption.
type publishOptionFunc func(*publish.Config)

func (f publishOptionFunc) applyPublish(c *publish.Config) { f(c) }

// ApplyPublish is applyPublish for settle's own packages (publish.Option).
func (f publishOptionFunc) ApplyPublish(c *publish.Config) { f(c) }

// Header sets one header of the published message. Names starting with HeaderPrefix,
// the payload field's name and the empty name are refused by the call. Every publish
// takes it; an inbox needs a Table.Headers column.
func Header(name, value string) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("Header")
		if c.Headers == nil {
			c.Headers = make(map[string]string, 2)
		}
		c.Headers[name] = value
	})
}

// Headers sets every header of h on the published message (h is not kept); see Header.
func Headers(h map[string]string) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		if len(h) == 0 {
			return
		}
		c.Give("Header")
		if c.Headers == nil {
			c.Headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			c.Headers[k] = v
		}
	})
}

// Key sets the message's key: it is written in the HeaderKey header, and on a
// partitioned stream (see PartitionedStream) it picks the partition: PartitionFor(k, n),
// so every message of one key lands in one partition, in publish order. A stream publish
// takes it.
func Key(k string) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("Key")
		c.Key = k
	})
}

// After delays the message's first delivery by d. On an inbox the row is inserted
// with retry_after = the database's now + d (a Table.RetryAfter column is needed). On
// Redis the message waits in the durable delay set of the consumer's mount, which the
// call must name with DelaySet: it is scored by the Redis server's TIME + d inside one
// script (the publisher's clock does not matter), and the mount's sweep delivers it
// exactly as it delivers a parked retry, as a first delivery (retry count 0), within the
// same lateness: a consumer that blocks in a read sweeps when the read ends, at most the
// mount's Block after the message is due. A negative d is refused; 0 is due at once.
// Not with At.
func After(d time.Duration) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("After")
		c.After, c.AfterSet = d, true
	})
}

// At delays the message's first delivery until t, as After does; a time already
// passed is due at once. Not with After.
func At(t time.Time) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("At")
		c.At = t
	})
}

// DelaySet names the durable delay set a delayed publish (After, At) to Redis waits
// in: the one the consumer's mount declares with DelayIn, whose sweep delivers it. It
// must share a hash slot with the stream or list published to ("{orders}:in" and
// "{orders}:delayed"); the set's TTL is refreshed as a parked retry refreshes it, and
// a delay longer than the TTL is refused. Without DelaySet, After and At are refused on
// Redis: a delay kept in the publishing process would be lost with it. Useless without
// After or At, and refused by an inbox.
func DelaySet(dz delayed.DurableZset) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("DelaySet")
		c.DelaySet = &dz
	})
}

// MaxLen bounds the stream published to at about n entries: the XADD trims the oldest
// (MAXLEN ~ n, which trims whole macro nodes, cheaply). It trims entries whether any
// group has read them or not: bound a stream by size only when losing unread entries
// beats growing without end (a metrics feed); the Stream mount's Trim, which trims only
// what every group acknowledged, is the safe bound for a work queue. Streams only; n
// must be positive; not with MinID or a delay.
func MaxLen(n int64) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("MaxLen")
		c.MaxLen = n
	})
}

// MinID trims the stream published to of the entries whose ids are below id (XADD
// MINID id, exactly), e.g. "1733040000000-0" for those older than that millisecond; like
// MaxLen it ignores whether groups read them. Streams only; not with MaxLen or a
// delay.
func MinID(id string) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("MinID")
		c.MinID = id
	})
}

// IdempotencyKey makes a stream publish idempotent under key: the first publish of key
// appends the entry and returns its id; another publish of key to the same stream
// within the window (IdempotencyWindow, DefaultIdempotencyWindow unless given) writes
// nothing and returns that first id. Checking, writing and remembering the id are one
// script in the stream's hash slot, so two producers racing with one key write one
// entry, and a producer that retries a publish whose answer it lost gets the first id
// back. Streams only; not with a delay (the entry is written later, by the sweep). key
// must not be empty. Defaults to none.
func IdempotencyKey(key string) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("IdempotencyKey")
		c.IdempotencyKey = key
	})
}

// IdempotencyWindow sets how long an IdempotencyKey's first publish answers for the key,
// from that publish: past it, the key publishes again. d must be positive; only with
// IdempotencyKey. Defaults to DefaultIdempotencyWindow.
func IdempotencyWindow(d time.Duration) PublishOption {
	return publishOptionFunc(func(c *publish.Config) {
		c.Give("IdempotencyWindow")
		c.IdempotencyWindow = d
	})
}

// DefaultIdempotencyWindow is how long an IdempotencyKey answers for its first publish
// unless IdempotencyWindow says otherwise: a day, longer than a producer's retries last.
const DefaultIdempotencyWindow = 24 * time.Hour

// publishOptions applies opts.
func publishOptions(opts []PublishOption) publish.Config { return publish.Apply(opts) }

// delay parks a delayed publish's member (encoded for kind: "stream", "list" or
// "channel") in c's delay set, due at the Redis server's TIME + After (or at At), in
// one script. key is the stream or list the set's sweep delivers into ("" for a
// channel, which is not a key and may live in any slot).
func (p *Publisher) delay(ctx context.Context, c publish.Config, key, kind, member string) error {
	where := fmt.Sprintf("%s %q", kind, key)
	if key == "" {
		where = kind
	}
	if err := checkDelayedPublish(c, key); err != nil {
		return fmt.Errorf("settle: publish to %s: %w", where, err)
	}
	at := int64(-1)
	if !c.At.IsZero() {
		at = c.At.UnixMilli()
	}
	destType := kind
	if key == "" {
		destType = ""
	}
	if _, err := script.DelayPublish(ctx, p.rdb, c.DelaySet.Key, key, destType, member, c.After, at, c.DelaySet.TTL); err != nil {
		return fmt.Errorf("settle: publish to %s after a delay: %w", where, err)
	}
	return nil
}

// checkDelayedPublish returns the refusal of a delayed publish to key: a delay needs a
// durable delay set (a delay kept in the publishing process would die with it), the
// set a delay (alone it is a mistake), and both one hash slot.
func checkDelayedPublish(c publish.Config, key string) error {
	if err := c.CheckDelay(); err != nil {
		return err
	}
	if err := c.CheckDelaySetAt(); err != nil {
		return err
	}
	switch dz := c.DelaySet; {
	case !c.Delayed():
		return errors.New("option DelaySet without After or At: give the delay")
	case dz == nil:
		return errors.New("option After or At needs DelaySet(delayed.DurableZset{…}), the delay set of the consumer's mount: a delay held in the publishing process would be lost with it, and Redis keeps none of its own")
	case dz.Key == "":
		return errors.New("option DelaySet(delayed.DurableZset{}): Key is empty")
	case dz.TTL < 0:
		return fmt.Errorf("option DelaySet(delayed.DurableZset{TTL: %s}): TTL must not be negative", dz.TTL)
	case dz.TTL > 0 && c.AfterSet && c.After >= dz.TTL:
		return fmt.Errorf("After(%s) is not within the delay set's TTL of %s: the set could expire with the message in it", c.After, dz.TTL)
	case key == "":
		return nil
	case dz.Key == key:
		return fmt.Errorf("option DelaySet(delayed.DurableZset{Key: %q}): the delay set's key is the destination's", dz.Key)
	}
	if err := keys.SameSlot(key, c.DelaySet.Key); err != nil {
		return fmt.Errorf("the destination and its delay set must share a hash slot (the sweep moves between them in one script): %w", err)
	}
	return nil
}

// checkStreamBounds returns the refusal of a stream publish's length bounds: MaxLen
// must be positive, not with MinID, and neither with a delay (the entry is written
// later, by the sweep, which does not trim).
func checkStreamBounds(c publish.Config) error {
	bounded := c.Has("MaxLen") || c.Has("MinID")
	switch {
	case c.Has("MaxLen") && c.MaxLen <= 0:
		return fmt.Errorf("MaxLen(%d): n must be positive", c.MaxLen)
	case c.Has("MinID") && c.MinID == "":
		return errors.New(`MinID(""): give an entry id`)
	case c.Has("MaxLen") && c.Has("MinID"):
		return errors.New("options MaxLen and MinID both given: give one")
	case bounded && (c.Delayed() || c.Has("DelaySet")):
		return errors.New("option MaxLen or MinID with a delay: the entry is written later by the delay set's sweep, which does not trim; bound the stream with the mount's Trim")
	}
	return nil
}

// checkIdempotency returns the refusal of a publish's IdempotencyKey and
// IdempotencyWindow: an empty key, a window without a key or not positive, a delay.
func checkIdempotency(c publish.Config) error {
	switch {
	case c.Has("IdempotencyKey") && c.IdempotencyKey == "":
		return errors.New(`IdempotencyKey(""): give a key`)
	case c.Has("IdempotencyWindow") && !c.Has("IdempotencyKey"):
		return errors.New("option IdempotencyWindow without IdempotencyKey: give the key")
	case c.Has("IdempotencyWindow") && c.IdempotencyWindow <= 0:
		return fmt.Errorf("IdempotencyWindow(%s): the window must be positive", c.IdempotencyWindow)
	case c.Has("IdempotencyKey") && (c.Delayed() || c.Has("DelaySet")):
		return errors.New("option IdempotencyKey with a delay: the entry is written later by the delay set's sweep, which keeps no idempotency key")
	}
	return nil
}

// publishOnce appends payload to the stream key unless c.IdempotencyKey was published
// there within its window, in one script (script.IdempotentPublish), and returns the
// id of the key's first entry.
func (p *Publisher) publishOnce(ctx context.Context, key string, payload []byte, c publish.Config) (string, error) {
	window := c.IdempotencyWindow
	if window == 0 {
		window = DefaultIdempotencyWindow
	}
	trim, arg := "", any("")
	switch {
	case c.MaxLen > 0:
		trim, arg = "MAXLEN", c.MaxLen
	case c.MinID != "":
		trim, arg = "MINID", c.MinID
	}
	mark := keys.Derived(key, "idempotency:"+c.IdempotencyKey)
	id, _, err := script.IdempotentPublish(ctx, p.rdb, key, mark, window, trim, arg, wire.StreamValues(payload, c.Headers))
	if err != nil {
		return "", fmt.Errorf("settle: publish to %q with IdempotencyKey(%q): %w", key, c.IdempotencyKey, err)
	}
	return id, nil
}

// publishToken is the id part of a delayed stream publish's member: unique, so two
// equal messages stay two members (a parked retry uses its entry's id).
func publishToken() string { return "publish-" + rand.Text() }

// The Repliers of a Publisher write a reply as it is, with the headers settle gives it
// (HeaderReplyOf, HeaderReplySource), which Publish itself refuses as reserved.

// StreamReplier returns a Replier that appends each reply to the stream named by the
// mount's ReplyTo, through p's client (another Redis than the source's, or a stream in
// another hash slot): for ReplyVia.
func (p *Publisher) StreamReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: dest, Values: wire.StreamValues(payload, headers)}).Err(); err != nil {
			return fmt.Errorf("settle: reply to stream %q: xadd: %w", dest, err)
		}
		return nil
	})
}

// ListReplier returns a Replier that pushes each reply, in settle's envelope, to the
// tail of the list named by the mount's ReplyTo, through p's client: for ReplyVia.
func (p *Publisher) ListReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.RPush(ctx, dest, wire.Envelope(payload, headers)).Err(); err != nil {
			return fmt.Errorf("settle: reply to list %q: rpush: %w", dest, err)
		}
		return nil
	})
}

// ChannelReplier returns a Replier that publishes each reply, in settle's envelope, to
// the channel named by the mount's ReplyTo, through p's client: for ReplyVia. A channel
// keeps nothing: a reply nobody is subscribed to is gone, and still counts as published.
func (p *Publisher) ChannelReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.Publish(ctx, dest, wire.Envelope(payload, headers)).Err(); err != nil {
			return fmt.Errorf("settle: reply to channel %q: publish: %w", dest, err)
		}
		return nil
	})
}
