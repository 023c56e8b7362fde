package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// PubSubSource subscribes to a Redis Pub/Sub channel or pattern. Make one with PubSub or
// PubSubPattern.
type PubSubSource struct {
	cfg     pubsubConfig
	name    string // a channel, or a pattern when pattern is true
	pattern bool
	rdb     redis.UniversalClient
}

var _ Source = (*PubSubSource)(nil)

// PubSub returns a source subscribed to channel (SUBSCRIBE). Pub/Sub is at-most-once:
// Redis keeps nothing for a subscriber, so a message published while no App listens, or
// being handled when the process dies, is lost, and Retry without MaxAttempts cannot be
// honoured (lost, with a warning). Retry copies are published to the channel they came
// on (or OutRetry), dead letters to the DeadLetter channel.
func PubSub(rdb redis.UniversalClient, channel string, opts ...PubSubOption) *PubSubSource {
	return newPubSub(rdb, channel, false, opts)
}

// PubSubPattern returns a source subscribed to every channel matching pattern
// (PSUBSCRIBE, Redis glob syntax). It must be given OutRetry: retry copies go there. It
// is otherwise PubSub, at-most-once included.
func PubSubPattern(rdb redis.UniversalClient, pattern string, opts ...PubSubOption) *PubSubSource {
	return newPubSub(rdb, pattern, true, opts)
}

func newPubSub(rdb redis.UniversalClient, name string, pattern bool, opts []PubSubOption) *PubSubSource {
	cfg := pubsubConfig{batch: DefaultBatch, block: DefaultBlock, buffer: DefaultBuffer}
	for _, o := range opts {
		if o != nil {
			o.applyPubSub(&cfg)
		}
	}
	return &PubSubSource{cfg: cfg, name: name, pattern: pattern, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *PubSubSource) Transport(env source.Env) source.Transport {
	t := &pubsubTransport{env: env, ids: redisbase.NewDeliveryIDs(""), reader: redisbase.EnvelopeReader{Logger: env.Logger, Mount: env.Mount}, src: s}
	t.delays, t.parks = redisbase.DelaySetOf(env)
	return t
}

// pubsubTransport is one mount's subscription.
type pubsubTransport struct {
	ch        <-chan *redis.Message
	delays    redisbase.DelaySet // the mount's durable delay set, when parks
	env       source.Env
	ids       *redisbase.DeliveryIDs
	parks     bool
	reader    redisbase.EnvelopeReader
	src       *PubSubSource
	sub       *redis.PubSub
	unsettled atomic.Int64 // deliveries handed out and not settled yet
}

func (t *pubsubTransport) Info() source.Info {
	return source.Info{
		Batch: t.src.cfg.batch,
		Block: t.src.cfg.block,
		Caps:  source.Caps{Parks: t.parks, RetryWithoutCap: source.ActionLose},
		Key:   t.src.name,
		Kind:  source.KindChannel,
	}
}

func (t *pubsubTransport) Validate(p source.Policy) []error {
	var errs []error
	s := t.src
	what := "PubSub"
	if s.pattern {
		what = "PubSubPattern"
	}
	if s.rdb == nil {
		errs = append(errs, fmt.Errorf("%s: redis client is nil", what))
	}
	if s.name == "" {
		errs = append(errs, fmt.Errorf("%s: channel is empty", what))
	}
	if s.pattern && s.cfg.outRetry == "" {
		errs = append(errs, fmt.Errorf("PubSubPattern(%q) has no out-retry channel: a pattern subscription reads many channels and names none, so give settle.OutRetry(channel) for its retry copies", s.name))
	}
	if s.cfg.batch < 1 {
		errs = append(errs, fmt.Errorf("Batch(%d): must be at least 1", s.cfg.batch))
	}
	if s.cfg.block <= 0 {
		errs = append(errs, fmt.Errorf("Block(%s): must be positive", s.cfg.block))
	}
	if s.cfg.buffer < 1 {
		errs = append(errs, fmt.Errorf("Buffer(%d): must be at least 1", s.cfg.buffer))
	}
	if p.DeadLetter != "" && !s.pattern && p.DeadLetter == s.name {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the channel the mount reads: dead letters would be read again", p.DeadLetter))
	}
	// A durable delay set needs no slot check: the park and sweep scripts touch the set
	// alone (a channel is not a key).
	return errs
}

// Open subscribes and waits for Redis to confirm the subscription, so a message
// published after Open returns is received.
func (t *pubsubTransport) Open(ctx context.Context) error {
	s := t.src
	if err := redisbase.CheckPerms(ctx, s.rdb, t.perms()); err != nil {
		return err
	}
	if s.pattern {
		t.sub = s.rdb.PSubscribe(ctx, s.name)
	} else {
		t.sub = s.rdb.Subscribe(ctx, s.name)
	}
	if _, err := t.sub.Receive(ctx); err != nil {
		_ = t.sub.Close()
		return fmt.Errorf("subscribe %q: %w", s.name, err)
	}
	t.ch = t.sub.Channel(redis.WithChannelSize(s.cfg.buffer))
	t.env.Logger.DebugContext(ctx, "settle: subscribed", slog.String(attrMount, t.env.Mount), slog.String("channel", s.name), slog.Bool("pattern", s.pattern))
	return nil
}

// errUnsubscribed is Fetch's error once the subscription has been closed.
var errUnsubscribed = errors.New("subscription closed")

func (t *pubsubTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	if t.parks {
		var err error
		if wait, err = t.sweepDelays(ctx, wait); err != nil {
			return nil, err
		}
	}
	// The wait is on the wall clock, as Redis's own blocking reads are: a test's paused
	// clock must not hold a shutdown. A due delay bounds it like a blocking read.
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var first *redis.Message
	select {
	case m, ok := <-t.ch:
		if !ok {
			return nil, fmt.Errorf("channel %q: %w", t.src.name, errUnsubscribed)
		}
		first = m
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
	ds := []*source.Delivery{t.delivery(ctx, first)}
	for len(ds) < max {
		select {
		case m, ok := <-t.ch:
			if !ok {
				return ds, nil
			}
			ds = append(ds, t.delivery(ctx, m))
		default:
			return ds, nil
		}
	}
	return ds, nil
}

// retryChannel is where the mount's retry copies go: OutRetry, or the subscribed
// channel (a pattern mount without OutRetry is refused at startup).
func (t *pubsubTransport) retryChannel() string {
	if t.src.cfg.outRetry != "" {
		return t.src.cfg.outRetry
	}
	return t.src.name
}

// sweepDelays publishes the due copies of the mount's delay set to the retry channel
// and returns how long the next wait may last (see redisbase.DelaySet.sweep).
func (t *pubsubTransport) sweepDelays(ctx context.Context, wait time.Duration) (time.Duration, error) {
	dest, unheard := t.retryChannel(), 0
	wait, _, err := t.delays.Sweep(ctx, wait, t.unsettled.Load() > 0, func(ctx context.Context, now int64) (script.SweepResult, error) {
		res, err := script.SweepChannel(ctx, t.src.rdb, t.delays.Key, dest, now, script.SweepBatch)
		unheard += res.Unheard
		return res, err
	})
	if unheard > 0 && !t.clustered() {
		t.env.Logger.WarnContext(ctx, "settle: delayed retry copies published to a channel with no subscriber: they are lost (pub/sub is at-most-once)",
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.name), slog.String("channel", dest), slog.Int("count", unheard))
	}
	if err != nil {
		return wait, fmt.Errorf("channel %q: sweep delays from %q: %w", t.src.name, t.delays.Key, err)
	}
	return wait, nil
}

func (t *pubsubTransport) delivery(ctx context.Context, m *redis.Message) *source.Delivery {
	t.unsettled.Add(1)
	payload, headers, ok, rc := t.reader.Read(ctx, m.Channel, []byte(m.Payload))
	return &source.Delivery{
		Attempt:    rc + 1,
		HasPayload: ok,
		Headers:    headers,
		ID:         t.ids.Next(),
		Key:        m.Channel,
		Payload:    payload,
		RetryCount: rc,
	}
}

// Ack does nothing: a received message is gone from Redis.
func (t *pubsubTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	t.unsettled.Add(-int64(len(ds)))
	return nil
}

// Moves writes each move on its own (the receive already took the original, so there is
// nothing to complete): a retry copy is published to OutRetry, or to the channel the
// message came on; a dead letter to its channel; a parked copy (retry count + 1, in its
// envelope) goes into the mount's delay set, due once its delay has passed on the Redis
// server's clock, to be published to the retry channel.
func (t *pubsubTransport) Moves(ctx context.Context, ms []source.Move) []error {
	defer t.unsettled.Add(-int64(len(ms)))
	return source.EachMove(ms, func(m source.Move) error {
		switch m.Action {
		case source.ActionCopy:
			dest := t.src.cfg.outRetry
			if dest == "" {
				dest = m.Delivery.Key
			}
			return t.publish(ctx, m.Delivery, dest, m.Headers, "retry copy")
		case source.ActionDeadLetter:
			return t.publish(ctx, m.Delivery, m.Dest, m.Headers, "dead letter")
		case source.ActionPark:
			if err := t.delays.ParkValue(ctx, t.src.rdb, m); err != nil {
				return fmt.Errorf("channel %q: park of %s in %q: %w", m.Delivery.Key, m.Delivery.ID, t.delays.Key, err)
			}
			return nil
		default:
			return source.UnsupportedMove(source.KindChannel, m)
		}
	})
}

func (t *pubsubTransport) publish(ctx context.Context, d *source.Delivery, dest string, headers map[string]string, what string) error {
	n, err := t.src.rdb.Publish(ctx, dest, wire.Envelope(d.Payload, headers)).Result()
	if err != nil {
		return fmt.Errorf("channel %q: %s of %s to %q: publish: %w", d.Key, what, d.ID, dest, err)
	}
	if n == 0 && !t.clustered() {
		t.env.Logger.WarnContext(ctx, "settle: "+what+" published to a channel with no subscriber: it is lost (pub/sub is at-most-once)",
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, d.Key), slog.String("channel", dest), slog.String(attrMsgID, d.ID))
	}
	return nil
}

// clustered reports whether the client is a cluster client: on a Redis Cluster, PUBLISH
// counts only the subscribers on the node that received it, so a count of 0 does not
// mean nobody received the message (the cluster bus carries it to the other nodes).
func (t *pubsubTransport) clustered() bool {
	_, ok := t.src.rdb.(*redis.ClusterClient)
	return ok
}

// Close unsubscribes.
func (t *pubsubTransport) Close(context.Context) error {
	if t.sub == nil {
		return nil
	}
	return t.sub.Close()
}

// perms are the commands a pub/sub consumer runs: its subscription, its retry copies and
// dead letters, and the delay set.
func (t *pubsubTransport) perms() []redisbase.Perm {
	s := t.src
	sub := redisbase.Perm{"SUBSCRIBE", s.name}
	if s.pattern {
		sub = redisbase.Perm{"PSUBSCRIBE", s.name}
	}
	ps := []redisbase.Perm{sub, {"PUBLISH", t.retryChannel(), "v"}}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, redisbase.Perm{"PUBLISH", dl, "v"})
	}
	if t.parks {
		ps = append(ps, redisbase.ScriptPerms()...)
	}
	return append(ps, redisbase.DelayPerms(t.delays, t.parks)...)
}

// Paused is always false: a Pub/Sub subscriber cannot be paused. Redis keeps nothing
// for it, so a paused subscriber would only lose what is published meanwhile (beyond
// its Buffer); stop the App instead. settle/admin refuses to pause a channel that has
// subscribers.
func (t *pubsubTransport) Paused(context.Context) (bool, error) { return false, nil }
