package settle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// listKeeper is a reliable list consumer's background loop: it keeps the consumer
// registered and its heartbeat alive (every heartbeat TTL/3) and, every TTL, takes the
// processing lists of the list's consumers whose heartbeat expired into its own
// consumer's processing list, where the transport delivers them. Both run on the wall
// clock: the heartbeat expires on Redis's clock, which a test's fake clock does not move.
type listKeeper struct {
	consumer   string // this consumer's name
	consumers  string // the set of consumer names of the list
	env        source.Env
	heartbeat  string // this consumer's heartbeat key
	key        string // the list
	processing string // this consumer's processing list
	rdb        redis.UniversalClient
	reader     *envelopeReader
	tookFunc   func(values []string, all bool) // told of the items taken into the processing list
	ttl        time.Duration                   // the heartbeat's

	done chan struct{}
	stop context.CancelFunc
}

// recoverBatch bounds the items one recovery script moves.
const recoverBatch = 100

// start takes back the consumer's own processing list, registers the consumer, recovers
// the dead consumers' lists and starts the loop.
func (k *listKeeper) start(ctx context.Context) error {
	if _, err := k.take(ctx, k.consumer, false); err != nil {
		return err
	}
	if err := k.beat(ctx); err != nil {
		return err
	}
	k.recoverOthers(ctx)
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

// run refreshes the heartbeat every TTL/3 and recovers dead consumers every TTL, until
// ctx ends.
func (k *listKeeper) run(ctx context.Context) {
	defer close(k.done)
	ttl := k.ttl
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		bctx, cancel := context.WithTimeout(ctx, ttl/3)
		if err := k.beat(bctx); err != nil && ctx.Err() == nil {
			k.env.Logger.ErrorContext(ctx, "settle: reliable list heartbeat failed: if it expires, other consumers recover this consumer's items",
				slog.String(attrMount, k.env.Mount), slog.String(attrKey, k.key), slog.Any(attrError, err))
		}
		cancel()
		if n%3 == 0 {
			k.recoverOthers(ctx)
		}
	}
}

// recoverOthers takes the processing lists of the list's consumers whose heartbeat has
// expired.
func (k *listKeeper) recoverOthers(ctx context.Context) {
	names, err := k.rdb.SMembers(ctx, k.consumers).Result()
	if err != nil {
		if ctx.Err() == nil {
			k.env.Logger.ErrorContext(ctx, "settle: reliable list: read consumers", slog.String(attrMount, k.env.Mount), slog.Any(attrError, err))
		}
		return
	}
	for _, name := range names {
		if name == k.consumer || ctx.Err() != nil {
			continue
		}
		if _, err := k.take(ctx, name, true); err != nil && ctx.Err() == nil {
			k.env.Logger.ErrorContext(ctx, "settle: reliable list: recovery failed", slog.String(attrMount, k.env.Mount),
				slog.String("consumer", name), slog.Any(attrError, err))
		}
	}
}

// take moves the items of name's processing list into this consumer's, if name's
// heartbeat is absent (or regardless, when checkHeartbeat is false: this consumer's own
// list, left by an earlier process of its name), each with its retry count + 1: the
// delivery that never settled counts. The transport then delivers them, and the engine
// decides what becomes of each like any delivery (one that arrives past the cap is
// dead-lettered without running its handler). It returns how many items it took.
func (k *listKeeper) take(ctx context.Context, name string, checkHeartbeat bool) (int, error) {
	processing := keys.ListProcessing(k.key, name)
	var snapshot []string // this consumer's own list is read once: its items come back to it
	own := name == k.consumer
	if own {
		var err error
		if snapshot, err = k.rdb.LRange(ctx, processing, 0, -1).Result(); err != nil {
			return 0, fmt.Errorf("reliable list %q: read own processing list: %w", k.key, err)
		}
	}
	total := 0
	for {
		var items []string
		if own {
			n := min(len(snapshot), recoverBatch)
			items, snapshot = snapshot[:n], snapshot[n:]
		} else {
			var err error
			if items, err = k.rdb.LRange(ctx, processing, 0, recoverBatch-1).Result(); err != nil {
				return total, fmt.Errorf("reliable list %q: read processing list of %s: %w", k.key, name, err)
			}
		}
		values := make([]string, len(items))
		for i, item := range items {
			payload, headers, _, rc := k.reader.read(ctx, k.key, []byte(item))
			values[i] = string(wire.Envelope(payload, withRetryCount(headers, rc+1)))
		}
		n, err := k.move(ctx, name, processing, k.processing, checkHeartbeat, items, values)
		if err != nil || n < 0 {
			return total, err
		}
		if n > 0 {
			k.tookFunc(values, n == len(items))
			k.env.Logger.WarnContext(ctx, "settle: took over the items of a reliable list consumer that stopped without settling them",
				slog.String(attrMount, k.env.Mount), slog.String(attrKey, k.key), slog.String("consumer", name), slog.Int("count", n))
		}
		total += n
		if len(items) < recoverBatch || n == 0 || own && len(snapshot) == 0 {
			return total, nil
		}
	}
}

// move runs one recovery script call: items leave name's processing list for dest,
// each replaced by its value (only while name's heartbeat is absent when checkHeartbeat),
// and name leaves the consumer set once its list is empty. It returns how many items
// moved, or -1 when name is alive.
func (k *listKeeper) move(ctx context.Context, name, processing, dest string, checkHeartbeat bool, items, values []string) (int, error) {
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
	n, err := script.ListRecover.Run(ctx, k.rdb, []string{hb, processing, dest, dest, k.consumers}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("reliable list %q: recover processing list of %s: %w", k.key, name, err)
	}
	return n, nil
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
		if _, err := k.move(ctx, k.consumer, k.processing, k.key, false, left[:n], left[:n]); err != nil {
			return err
		}
		if left = left[n:]; len(left) == 0 {
			return nil
		}
	}
}
