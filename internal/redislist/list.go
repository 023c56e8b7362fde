// Package redislist is settle's Redis list transports: the consumers of a settle.List
// (LPOP, at-most-once) and of a settle.ReliableList (items moved a batch at a time into
// a processing list per consumer, with a heartbeat, the keeper that recovers dead
// consumers' items and the takeover that runs them alone). It is not for users:
// settle's public sources make them through New and NewReliable, with the values they
// were given.
package redislist

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

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// Config is what a List mount was given.
type Config struct {
	// Batch is the most items one Fetch returns.
	Batch int
	// Block is the longest one Fetch blocks (rounded up to whole seconds).
	Block time.Duration
	// Client is the Redis client.
	Client redis.UniversalClient
	// Key is the list.
	Key string
}

// New returns the transport of one mount of the plain list c describes.
func New(env source.Env, c Config) source.Transport {
	t := &listTransport{cfg: c, env: env, ids: redisbase.NewDeliveryIDs(""), reader: redisbase.EnvelopeReader{Logger: env.Logger, Mount: env.Mount}}
	t.delays, t.parks = redisbase.DelaySetOf(env)
	return t
}

// listTransport is one mount's consumer on a plain list.
type listTransport struct {
	cfg       Config
	delays    redisbase.DelaySet // the mount's durable delay set, when parks
	env       source.Env
	ids       *redisbase.DeliveryIDs
	parks     bool
	reader    redisbase.EnvelopeReader
	unsettled atomic.Int64 // deliveries handed out and not settled yet
}

func (t *listTransport) Info() source.Info {
	return source.Info{
		Batch: t.cfg.Batch,
		Block: listBlock(t.cfg.Block),
		Caps:  source.Caps{Parks: t.parks, RetryWithoutCap: source.ActionLose},
		Key:   t.cfg.Key,
		Kind:  source.KindList,
		Pool:  redisbase.PoolOf(t.cfg.Client, 1), // the blocking read
	}
}

func (t *listTransport) Validate(p source.Policy) []error {
	errs := validateList("list", t.cfg.Client, t.cfg.Key, t.cfg.Batch, t.cfg.Block, p)
	return append(errs, redisbase.DelaySetProblems(p, t.cfg.Client, "list", t.cfg.Key)...)
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
// redisbase.MinServerBlock), so such a read blocks whole seconds ending at least a tick before due,
// and under that does not block in Redis at all: it waits on the client and returns
// redis.Nil, and the caller's next read sweeps the delay set again (callers pop without
// blocking before they call this).
func blockingPop(ctx context.Context, rdb redis.UniversalClient, key, dest string, wait time.Duration) (string, error) {
	if wait%time.Second != 0 {
		block := (wait - redisbase.MinServerBlock).Truncate(time.Second)
		if block < time.Second {
			// Too short to block in Redis (see redisbase.MinServerBlock): look once
			// without blocking, then wait on the client. Without the look, a reliable
			// list that found its list empty (and so skips its batch take) would
			// read nothing for as long as delays keep every wait short.
			if v, err := popNow(ctx, rdb, key, dest); !errors.Is(err, redis.Nil) {
				return v, err
			}
			redisbase.PollWait(ctx, min(wait, redisbase.MinServerBlock))
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

// popNow moves the head of key to the tail of dest (LMOVE, not retried), or pops it
// when dest is empty (LPOP), without blocking: redis.Nil when key is empty.
func popNow(ctx context.Context, rdb redis.UniversalClient, key, dest string) (string, error) {
	if dest == "" {
		return rdb.LPop(ctx, key).Result()
	}
	cmd := redis.NewStringCmd(ctx, "lmove", key, dest, "left", "right")
	_ = rdb.Process(ctx, stringOnce{cmd})
	return cmd.Result()
}

// listBlock rounds a block bound up to whole seconds, the resolution go-redis gives
// BLPOP and BLMOVE.
func listBlock(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

func (t *listTransport) Open(ctx context.Context) error {
	if err := redisbase.CheckPerms(ctx, t.cfg.Client, t.perms()); err != nil {
		return err
	}
	return t.CheckKeys(ctx)
}

// CheckKeys implements source.KeyChecker.
func (t *listTransport) CheckKeys(ctx context.Context) error {
	if err := redisbase.CheckKeyTypes(ctx, t.cfg.Client, redisbase.MountKeyTypes(t.env.Policy, "list")); err != nil {
		return fmt.Errorf("list %q: %w", t.cfg.Key, err)
	}
	return nil
}

func (t *listTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	s := t.cfg
	wait = listBlock(wait)
	if t.parks {
		wait = t.sweepDelays(ctx, wait)
	}
	vals, err := s.Client.LPopCount(ctx, s.Key, max).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list %q: lpop: %w", s.Key, err)
	}
	if len(vals) == 0 {
		// Idle: block for one item, then take what else came with it.
		v, err := blockingPop(ctx, s.Client, s.Key, "", wait)
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %q: blpop: %w", s.Key, err)
		}
		vals = []string{v}
		if max > 1 {
			more, err := s.Client.LPopCount(ctx, s.Key, max-1).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				// The items popped so far are delivered; the rest wait for the next read.
				t.env.Logger.WarnContext(ctx, "settle: list: lpop after blpop failed", slog.String(source.AttrMount, t.env.Mount), slog.Any(source.AttrError, err))
			}
			vals = append(vals, more...)
		}
	}
	ds := make([]*source.Delivery, len(vals))
	for i, v := range vals {
		payload, headers, ok, rc := t.reader.Read(ctx, s.Key, []byte(v))
		ds[i] = &source.Delivery{
			Attempt:    rc + 1,
			HasPayload: ok,
			Headers:    headers,
			ID:         t.ids.Next(),
			Key:        s.Key,
			Payload:    payload,
			RetryCount: rc,
		}
	}
	t.unsettled.Add(int64(len(ds)))
	return ds, nil
}

// sweepDelays pushes the due copies of the mount's delay set to the tail of the list
// and returns how long the next read may block (see sweepListDelays).
func (t *listTransport) sweepDelays(ctx context.Context, wait time.Duration) time.Duration {
	return sweepListDelays(ctx, t.cfg.Client, t.cfg.Key, t.delays, t.unsettled.Load() > 0, wait)
}

// sweepListDelays moves the due copies of delays to the tail of the list key and
// returns how long the next read may block (see redisbase.DelaySet.Sweep); held says
// deliveries are out, whose copies may come due.
func sweepListDelays(ctx context.Context, rdb redis.UniversalClient, key string, delays redisbase.DelaySet, held bool, wait time.Duration) time.Duration {
	wait, _ = delays.Sweep(ctx, wait, held, func(ctx context.Context, now int64) (script.SweepResult, error) {
		return script.SweepList(ctx, rdb, delays.Key, key, now, script.SweepBatch)
	})
	return wait
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
			if err = t.cfg.Client.RPush(ctx, t.cfg.Key, wire.Envelope(d.Payload, m.Headers)).Err(); err != nil {
				err = fmt.Errorf("list %q: retry copy of %s: rpush: %w", t.cfg.Key, d.ID, err)
			}
		case source.ActionDeadLetter:
			if err = t.cfg.Client.RPush(ctx, m.Dest, wire.Envelope(d.Payload, m.Headers)).Err(); err != nil {
				err = fmt.Errorf("list %q: dead letter of %s to %q: rpush: %w", t.cfg.Key, d.ID, m.Dest, err)
			}
		case source.ActionPark:
			if err = t.delays.ParkValue(ctx, t.cfg.Client, m); err != nil {
				err = fmt.Errorf("list %q: park of %s in %q: %w", t.cfg.Key, d.ID, t.delays.Key, err)
			}
		default:
			err = source.UnsupportedMove(source.KindList, m)
		}
		return err
	})
}

func (t *listTransport) Close(context.Context) error { return nil }

// stringOnce is a list move (LMOVE, BLMOVE) that go-redis must not send twice: if Redis
// moved the item and the reply was lost, a retry would move another one and the first
// would sit in the processing list unseen. With NoRetry the failure reaches the
// transport, which then re-reads its processing list.
type stringOnce struct{ *redis.StringCmd }

// NoRetry keeps go-redis from running the move again after a connection failure.
func (stringOnce) NoRetry() bool { return true }

// blmoveOnce runs a BLMOVE of the head of key to the tail of dest, blocking up to wait
// (sub-second waits as a decimal timeout), not retried.
func blmoveOnce(ctx context.Context, rdb redis.UniversalClient, key, dest string, wait time.Duration) (string, error) {
	var cmd *redis.StringCmd
	if wait >= time.Second {
		// Built on a pipeline that is never run, for its blocking read timeout (see
		// xreadGroupOnce).
		cmd = rdb.Pipeline().BLMove(ctx, key, dest, "LEFT", "RIGHT", wait.Truncate(time.Second))
	} else {
		timeout := strconv.FormatFloat(max(wait, time.Millisecond).Seconds(), 'f', 3, 64)
		cmd = redis.NewStringCmd(ctx, "blmove", key, dest, "left", "right", timeout)
	}
	_ = rdb.Process(ctx, stringOnce{cmd})
	return cmd.Result()
}

// perms are the commands a plain list consumer runs: its pops, its copies and dead
// letters, the pause key and the delay set.
func (t *listTransport) perms() []redisbase.Perm {
	key := t.cfg.Key
	ps := []redisbase.Perm{{"BLPOP", key, "0"}, {"LPOP", key, "1"}, {"RPUSH", key, "v"}, {"EXISTS", keys.Paused(key, "")}}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, redisbase.Perm{"RPUSH", dl, "v"})
	}
	if t.parks {
		ps = append(append(ps, redisbase.ScriptPerms()...), redisbase.Perm{"TYPE", key})
	}
	return append(ps, redisbase.DelayPerms(t.delays, t.parks)...)
}

// Paused reports whether the list is paused: its control key (keys.Paused(list, ""))
// exists.
func (t *listTransport) Paused(ctx context.Context) (bool, error) {
	return redisbase.Paused(ctx, t.cfg.Client, t.cfg.Key, "")
}
