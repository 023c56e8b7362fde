package redislist

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// listKeeper is a reliable list consumer's background loop: it keeps the consumer
// registered and its heartbeat alive (every heartbeat TTL/3) and, every TTL, asks the
// transport to re-read its own processing list for items no delivery holds (see
// readOwnProcessing) and takes the items of the list's consumers whose heartbeat expired into its own consumer's
// processing list, where the transport delivers them, a lot at a time (see
// takeoverLot): the next lot as soon as the transport wakes it, once the last one has
// settled. Both run on the wall clock: the heartbeat expires on Redis's clock, which a
// test's fake clock does not move.
type listKeeper struct {
	consumer  string // this consumer's name
	consumers string // the set of consumer names of the list
	env       source.Env
	heartbeat string    // this consumer's heartbeat key
	key       string    // the list
	lots      lotHolder // told of the items taken, and asked how many to take
	// own holds the items an earlier process of this consumer's name left in its
	// processing list and not taken yet (held in the transport meanwhile). Touched only
	// by start and the loop.
	own        []string
	processing string // this consumer's processing list
	rdb        redis.UniversalClient
	reader     *redisbase.EnvelopeReader
	ttl        time.Duration   // the heartbeat's
	wake       <-chan struct{} // signalled when a lot has settled and more may be left
	// beatFailed: the last heartbeat failed, and it was logged (touched only by the loop).
	beatFailed bool

	done chan struct{}
	stop context.CancelFunc
}

// recoverBatch bounds the items one hand-back script call at Close moves.
const recoverBatch = 100

// start reads what an earlier process of this consumer's name left in its processing
// list (taken back lot by lot, like a dead consumer's: a crash charges those items
// too), registers the consumer, takes a first lot and starts the loop.
func (k *listKeeper) start(ctx context.Context) error {
	own, err := k.rdb.LRange(ctx, k.processing, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("reliable list %q: read own processing list: %w", k.key, err)
	}
	k.lots.hold(own)
	k.own = own
	if err := k.beat(ctx); err != nil {
		return err
	}
	k.recover(ctx)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.stop, k.done = cancel, make(chan struct{})
	go k.run(loopCtx)
	return nil
}

// beat refreshes the heartbeat and the consumer's registration.
func (k *listKeeper) beat(ctx context.Context) error {
	_, err := k.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k.heartbeat, "1", k.ttl)
		p.SAdd(ctx, k.consumers, k.consumer)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reliable list %q: heartbeat: %w", k.key, err)
	}
	return nil
}

// run refreshes the heartbeat every TTL/3 and recovers dead consumers every TTL and
// whenever woken, until ctx ends.
func (k *listKeeper) run(ctx context.Context) {
	defer close(k.done)
	ttl := k.ttl
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for ticks := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
			k.recover(ctx)
			continue
		case <-tick.C:
		}
		bctx, cancel := context.WithTimeout(ctx, ttl/3)
		if err := k.beat(bctx); ctx.Err() == nil {
			k.beaten(ctx, err)
		}
		cancel()
		if ticks++; ticks%3 == 0 {
			k.lots.markRescan()
			k.recover(ctx)
		}
	}
}

// recover takes one lot, once the last one has settled: this consumer's own leftovers
// first, then the items of the list's consumers whose heartbeat has expired.
func (k *listKeeper) recover(ctx context.Context) {
	room := k.lots.lotRoom()
	if room == 0 {
		return
	}
	// Until this round knows better: a lot that settles meanwhile wakes the loop again.
	// (Marked without a wake: one here woke the loop after every round, and an idle
	// list's keeper ran rounds back to back, 14,000 SMEMBERS a second.)
	k.lots.recovering()
	for room > 0 && len(k.own) > 0 && ctx.Err() == nil {
		n := min(room, len(k.own))
		items := k.own[:n]
		k.own = k.own[n:]
		took, _, err := k.take(ctx, k.consumer, false, items)
		k.lots.release(items) // held since start; taken or gone now (or, on an error, for a re-read)
		if err != nil && ctx.Err() == nil {
			k.env.Logger.ErrorContext(ctx, "settle: reliable list: recovery of own processing list failed", slog.String(source.AttrMount, k.env.Mount), slog.Any(source.AttrError, err))
		}
		room -= took
	}
	if room > 0 {
		room = k.recoverOthers(ctx, room)
	}
	k.lots.leftBehind(room == 0 || len(k.own) > 0)
}

// recoverOthers takes up to room items of the list's consumers whose heartbeat has
// expired and returns the room left.
func (k *listKeeper) recoverOthers(ctx context.Context, room int) int {
	names, err := k.rdb.SMembers(ctx, k.consumers).Result()
	if err != nil {
		if ctx.Err() == nil {
			k.env.Logger.ErrorContext(ctx, "settle: reliable list: read consumers", slog.String(source.AttrMount, k.env.Mount), slog.Any(source.AttrError, err))
		}
		return room
	}
	for _, name := range names {
		if name == k.consumer || room == 0 || ctx.Err() != nil {
			continue
		}
		processing := keys.ListProcessing(k.key, name)
		for room > 0 {
			items, err := k.rdb.LRange(ctx, processing, 0, int64(room)-1).Result()
			if err != nil {
				if ctx.Err() == nil {
					k.env.Logger.ErrorContext(ctx, "settle: reliable list: read processing list", slog.String(source.AttrMount, k.env.Mount),
						slog.String("consumer", name), slog.Any(source.AttrError, err))
				}
				break
			}
			took, alive, err := k.take(ctx, name, true, items)
			if err != nil && ctx.Err() == nil {
				k.env.Logger.ErrorContext(ctx, "settle: reliable list: recovery failed", slog.String(source.AttrMount, k.env.Mount),
					slog.String("consumer", name), slog.Any(source.AttrError, err))
			}
			room -= took
			if err != nil || alive || took == 0 {
				break
			}
		}
	}
	return room
}

// take moves items of name's processing list into this consumer's, if name's heartbeat
// is absent (or regardless, when checkHeartbeat is false: this consumer's own items,
// left by an earlier process of its name), each with its retry count + 1: the delivery
// that never settled counts. The transport then delivers them, and the engine decides
// what becomes of each like any delivery (one that arrives past the cap is
// dead-lettered without running its handler). It returns how many items it took, and
// whether name is alive.
func (k *listKeeper) take(ctx context.Context, name string, checkHeartbeat bool, items []string) (int, bool, error) {
	if len(items) == 0 {
		if checkHeartbeat {
			// An empty list: the script unregisters the consumer.
			_, alive, err := k.move(ctx, name, keys.ListProcessing(k.key, name), k.processing, true, nil, nil)
			return 0, alive, err
		}
		return 0, false, nil
	}
	values := make([]string, len(items))
	for i, item := range items {
		payload, headers, _, rc := k.reader.Read(ctx, k.key, []byte(item))
		values[i] = string(wire.Envelope(payload, wire.WithRetryCount(headers, rc+1)))
	}
	// Held before they appear in the processing list: a re-read must not deliver them.
	k.lots.hold(values)
	taken, alive, err := k.move(ctx, name, keys.ListProcessing(k.key, name), k.processing, checkHeartbeat, items, values)
	if err != nil {
		k.lots.tookUnknown(values)
		return 0, false, err
	}
	k.lots.took(values, taken)
	if len(taken) > 0 {
		k.env.Logger.WarnContext(ctx, "settle: took over the items of a reliable list consumer whose heartbeat expired while it held them (it stopped, hung or lost its connection)",
			slog.String(source.AttrMount, k.env.Mount), slog.String(source.AttrKey, k.key), slog.String("consumer", name), slog.Int("count", len(taken)))
		k.env.Emit(ctx, source.Event{Kind: source.EventRecovery, Count: len(taken)})
	}
	return len(taken), alive, nil
}

// move runs one recovery script call: items leave name's processing list for dest,
// each replaced by its value (only while name's heartbeat is absent when checkHeartbeat),
// and name leaves the consumer set once its list is empty. It returns the positions of
// the items that moved, and whether name is alive (then nothing moved).
func (k *listKeeper) move(ctx context.Context, name, processing, dest string, checkHeartbeat bool, items, values []string) ([]int, bool, error) {
	check := "0"
	if checkHeartbeat {
		check = "1"
	}
	args := make([]any, 0, 2+3*len(items))
	args = append(args, check, name)
	for i, item := range items {
		args = append(args, item, "list", values[i])
	}
	hb := keys.ListHeartbeat(k.key, name)
	taken, alive, err := script.RunListRecover(ctx, k.rdb, []string{hb, processing, dest, dest, k.consumers}, args...)
	if err != nil {
		return nil, false, fmt.Errorf("reliable list %q: recover processing list of %s: %w", k.key, name, err)
	}
	return taken, alive, nil
}

// close stops the loop, deletes the heartbeat, moves what is left in the processing
// list back to the tail of the list as it is, and leaves the consumer set.
func (k *listKeeper) close(ctx context.Context) error {
	if k.stop != nil {
		k.stop()
		<-k.done
	}
	if err := k.rdb.Del(ctx, k.heartbeat).Err(); err != nil {
		return fmt.Errorf("reliable list %q: delete heartbeat: %w", k.key, err)
	}
	left, err := k.rdb.LRange(ctx, k.processing, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("reliable list %q: read processing list: %w", k.key, err)
	}
	for {
		n := min(len(left), recoverBatch)
		if _, _, err := k.move(ctx, k.consumer, k.processing, k.key, false, left[:n], left[:n]); err != nil {
			return err
		}
		if left = left[n:]; len(left) == 0 {
			return nil
		}
	}
}

// beaten logs a heartbeat's failure once until one succeeds again, and then that it
// does: a server away for a minute is one error line, not one per tick.
func (k *listKeeper) beaten(ctx context.Context, err error) {
	switch {
	case err != nil && !k.beatFailed:
		k.env.Logger.ErrorContext(ctx, "settle: reliable list heartbeat failed: if it expires, other consumers recover this consumer's items (logged once until a heartbeat succeeds)",
			slog.String(source.AttrMount, k.env.Mount), slog.String(source.AttrKey, k.key), slog.Any(source.AttrError, err))
	case err == nil && k.beatFailed:
		k.env.Logger.InfoContext(ctx, "settle: reliable list heartbeat succeeds again", slog.String(source.AttrMount, k.env.Mount), slog.String(source.AttrKey, k.key))
	}
	k.beatFailed = err != nil
}
