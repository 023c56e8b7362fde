// Package redispubsub is settle's Redis Pub/Sub transport: the consumer of a
// settle.PubSub or settle.PubSubPattern mount. It is not for users: settle's public
// sources make it through New, with the values they were given.
package redispubsub

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

// Config is what a Pub/Sub mount was given.
type Config struct {
	// Batch is the most messages one Fetch returns.
	Batch int
	// Block is the longest one Fetch waits.
	Block time.Duration
	// Buffer is how many messages the subscription holds before a slow consumer
	// loses them.
	Buffer int
	// Client is the Redis client.
	Client redis.UniversalClient
	// Name is the channel, or the pattern when Pattern is true.
	Name string
	// OutRetry is where retry copies go; empty: the channel they came on.
	OutRetry string
	// Pattern: Name is a pattern (PSUBSCRIBE).
	Pattern bool
}

// New returns the transport of one mount of the subscription c describes.
func New(env source.Env, c Config) source.Transport {
	t := &transport{cfg: c, env: env, ids: redisbase.NewDeliveryIDs(""), reader: redisbase.EnvelopeReader{Logger: env.Logger, Mount: env.Mount}}
	t.delays, t.parks = redisbase.DelaySetOf(env)
	return t
}

// transport is one mount's subscription.
type transport struct {
	cfg       Config
	ch        <-chan *redis.Message
	delays    redisbase.DelaySet // the mount's durable delay set, when parks
	env       source.Env
	ids       *redisbase.DeliveryIDs
	parks     bool
	reader    redisbase.EnvelopeReader
	sub       *redis.PubSub
	unsettled atomic.Int64 // deliveries handed out and not settled yet
}

func (t *transport) Info() source.Info {
	return source.Info{
		Batch: t.cfg.Batch,
		Block: t.cfg.Block,
		Caps:  source.Caps{Parks: t.parks, RetryWithoutCap: source.ActionLose},
		Key:   t.cfg.Name,
		Kind:  source.KindChannel,
	}
}

func (t *transport) Validate(p source.Policy) []error {
	var errs []error
	s := t.cfg
	what := "PubSub"
	if s.Pattern {
		what = "PubSubPattern"
	}
	if s.Client == nil {
		errs = append(errs, fmt.Errorf("%s: redis client is nil", what))
	}
	if s.Name == "" {
		errs = append(errs, fmt.Errorf("%s: channel is empty", what))
	}
	if s.Pattern && s.OutRetry == "" {
		errs = append(errs, fmt.Errorf("PubSubPattern(%q) has no out-retry channel: a pattern subscription reads many channels and names none, so give settle.OutRetry(channel) for its retry copies", s.Name))
	}
	if s.Batch < 1 {
		errs = append(errs, fmt.Errorf("Batch(%d): must be at least 1", s.Batch))
	}
	if s.Block <= 0 {
		errs = append(errs, fmt.Errorf("Block(%s): must be positive", s.Block))
	}
	if s.Buffer < 1 {
		errs = append(errs, fmt.Errorf("Buffer(%d): must be at least 1", s.Buffer))
	}
	if p.DeadLetter != "" && !s.Pattern && p.DeadLetter == s.Name {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the channel the mount reads: dead letters would be read again", p.DeadLetter))
	}
	// A durable delay set needs no slot check: the park and sweep scripts touch the set
	// alone (a channel is not a key).
	return errs
}

// Open subscribes and waits for Redis to confirm the subscription, so a message
// published after Open returns is received.
// CheckKeys implements source.KeyChecker.
func (t *transport) CheckKeys(ctx context.Context) error {
	if err := redisbase.CheckKeyTypes(ctx, t.cfg.Client, redisbase.MountKeyTypes(t.env.Policy, "")); err != nil {
		return fmt.Errorf("channel %q: %w", t.cfg.Name, err)
	}
	return nil
}

func (t *transport) Open(ctx context.Context) error {
	s := t.cfg
	if err := redisbase.CheckPerms(ctx, s.Client, t.perms()); err != nil {
		return err
	}
	if err := t.CheckKeys(ctx); err != nil {
		return err
	}
	if s.Pattern {
		t.sub = s.Client.PSubscribe(ctx, s.Name)
	} else {
		t.sub = s.Client.Subscribe(ctx, s.Name)
	}
	if _, err := t.sub.Receive(ctx); err != nil {
		_ = t.sub.Close()
		return fmt.Errorf("subscribe %q: %w", s.Name, err)
	}
	t.ch = t.sub.Channel(redis.WithChannelSize(s.Buffer))
	t.env.Logger.DebugContext(ctx, "settle: subscribed", slog.String(source.AttrMount, t.env.Mount), slog.String("channel", s.Name), slog.Bool("pattern", s.Pattern))
	return nil
}

// errUnsubscribed is Fetch's error once the subscription has been closed.
var errUnsubscribed = errors.New("subscription closed")

func (t *transport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	if t.parks {
		wait = t.sweepDelays(ctx, wait)
	}
	// The wait is on the wall clock, as Redis's own blocking reads are: a test's paused
	// clock must not hold a shutdown. A due delay bounds it like a blocking read.
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var first *redis.Message
	select {
	case m, ok := <-t.ch:
		if !ok {
			return nil, fmt.Errorf("channel %q: %w", t.cfg.Name, errUnsubscribed)
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
func (t *transport) retryChannel() string {
	if t.cfg.OutRetry != "" {
		return t.cfg.OutRetry
	}
	return t.cfg.Name
}

// sweepDelays publishes the due copies of the mount's delay set to the retry channel
// and returns how long the next wait may last (see redisbase.DelaySet.sweep).
func (t *transport) sweepDelays(ctx context.Context, wait time.Duration) time.Duration {
	dest, unheard := t.retryChannel(), 0
	wait, _ = t.delays.Sweep(ctx, wait, t.unsettled.Load() > 0, func(ctx context.Context, now int64) (script.SweepResult, error) {
		res, err := script.SweepChannel(ctx, t.cfg.Client, t.delays.Key, dest, now, script.SweepBatch)
		unheard += res.Unheard
		return res, err
	})
	if unheard > 0 && !t.clustered() {
		t.env.Logger.WarnContext(ctx, "settle: delayed retry copies published to a channel with no subscriber: they are lost (pub/sub is at-most-once)",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.cfg.Name), slog.String("channel", dest), slog.Int("count", unheard))
	}
	return wait
}

func (t *transport) delivery(ctx context.Context, m *redis.Message) *source.Delivery {
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
func (t *transport) Ack(_ context.Context, ds []*source.Delivery) error {
	t.unsettled.Add(-int64(len(ds)))
	return nil
}

// Moves writes each move on its own (the receive already took the original, so there is
// nothing to complete): a retry copy is published to OutRetry, or to the channel the
// message came on; a dead letter to its channel; a parked copy (retry count + 1, in its
// envelope) goes into the mount's delay set, due once its delay has passed on the Redis
// server's clock, to be published to the retry channel.
func (t *transport) Moves(ctx context.Context, ms []source.Move) []error {
	defer t.unsettled.Add(-int64(len(ms)))
	return source.EachMove(ms, func(m source.Move) error {
		switch m.Action {
		case source.ActionCopy:
			dest := t.cfg.OutRetry
			if dest == "" {
				dest = m.Delivery.Key
			}
			return t.publish(ctx, m.Delivery, dest, m.Headers, "retry copy")
		case source.ActionDeadLetter:
			return t.publish(ctx, m.Delivery, m.Dest, m.Headers, "dead letter")
		case source.ActionPark:
			if err := t.delays.ParkValue(ctx, t.cfg.Client, m); err != nil {
				return fmt.Errorf("channel %q: park of %s in %q: %w", m.Delivery.Key, m.Delivery.ID, t.delays.Key, err)
			}
			return nil
		default:
			return source.UnsupportedMove(source.KindChannel, m)
		}
	})
}

func (t *transport) publish(ctx context.Context, d *source.Delivery, dest string, headers map[string]string, what string) error {
	n, err := t.cfg.Client.Publish(ctx, dest, wire.Envelope(d.Payload, headers)).Result()
	if err != nil {
		return fmt.Errorf("channel %q: %s of %s to %q: publish: %w", d.Key, what, d.ID, dest, err)
	}
	if n == 0 && !t.clustered() {
		t.env.Logger.WarnContext(ctx, "settle: "+what+" published to a channel with no subscriber: it is lost (pub/sub is at-most-once)",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, d.Key), slog.String("channel", dest), slog.String(source.AttrMsgID, d.ID))
	}
	return nil
}

// clustered reports whether the client is a cluster client: on a Redis Cluster, PUBLISH
// counts only the subscribers on the node that received it, so a count of 0 does not
// mean nobody received the message (the cluster bus carries it to the other nodes).
func (t *transport) clustered() bool {
	_, ok := t.cfg.Client.(*redis.ClusterClient)
	return ok
}

// Close unsubscribes.
func (t *transport) Close(context.Context) error {
	if t.sub == nil {
		return nil
	}
	return t.sub.Close()
}

// perms are the commands a pub/sub consumer runs: its subscription, its retry copies and
// dead letters, and the delay set.
func (t *transport) perms() []redisbase.Perm {
	s := t.cfg
	sub := redisbase.Perm{"SUBSCRIBE", s.Name}
	if s.Pattern {
		sub = redisbase.Perm{"PSUBSCRIBE", s.Name}
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
func (t *transport) Paused(context.Context) (bool, error) { return false, nil }
