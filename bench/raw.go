package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// runRaw is the raw loop; runRawCopy the same, but a retry-once retry appends a copy and
// acks the original, pipelined (what settle's Stream does, atomically; the raw retry
// before issue 9).
func runRaw(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	return rawLoop(ctx, rc, sc, false)
}

func runRawCopy(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	return rawLoop(ctx, rc, sc, true)
}

// rawLoop is the practical limit of a stream consumer: K goroutines, each one consumer of
// one group, reading XREADGROUP COUNT 100 and sending one XACK per batch. A retry
// (retry-once) leaves the failed ids unacked, and the consumer's next read takes them
// back from its own pending entries (XREADGROUP … 0) before reading new ones. Under an
// attempts cap (dlq-10pct) a retry appends a copy (field rc = retry count) and a dead
// letter appends to the dead-letter stream, in the same pipeline as the batch's XACK
// (not atomic: the limit, not a safe consumer).
func rawLoop(ctx context.Context, rc *runCtx, sc scenario, copyRetry bool) (*sample, error) {
	if sc.kind == kindDelay {
		return nil, errNA("a raw loop has no delay queue")
	}
	rdb := rc.client()
	defer rdb.Close()
	key, dlq, group := rc.prefix+"in", rc.prefix+"dlq", "g"
	if err := publishStream(ctx, rdb, key, rc.n, func(i int) []any { return []any{"payload", payload(i)} }); err != nil {
		return nil, err
	}
	if err := rdb.XGroupCreate(ctx, key, group, "0").Err(); err != nil {
		return nil, err
	}
	cnt := newCounter(rc.n)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := rc.meter.start(ctx); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, sc.workers)
	for w := range sc.workers {
		wg.Go(func() {
			if err := rawWorker(runCtx, rdb, key, dlq, group, fmt.Sprintf("c%d", w), sc, copyRetry, cnt); err != nil {
				errs <- err
			}
		})
	}
	var err error
	select {
	case <-cnt.done:
	case err = <-errs:
	case <-time.After(rc.timeout):
		err = fmt.Errorf("timed out with %d of %d done", cnt.n.Load(), rc.n)
	}
	s, serr := rc.meter.stop(ctx, rc.n)
	cancel()
	wg.Wait()
	return s, errors.Join(err, serr)
}

func rawWorker(ctx context.Context, rdb *redis.Client, key, dlq, group, consumer string, sc scenario, copyRetry bool, cnt *counter) error {
	const count = 100
	pending := 0 // entries this consumer left unacked to retry them: read back first
	for ctx.Err() == nil {
		start := ">"
		if pending > 0 {
			start = "0" // this consumer's own pending entries, oldest first
		}
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{key, start}, Count: count, Block: 100 * time.Millisecond,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("xreadgroup: %w", err)
		}
		var b rawBatch
		if start == "0" {
			// Redeliveries of the entries left unacked: their second attempt succeeds.
			for _, m := range res[0].Messages {
				b.ack = append(b.ack, m.ID)
			}
			b.final = len(b.ack)
			pending -= len(b.ack)
			if len(b.ack) == 0 {
				pending = 0
			}
		} else {
			b = sortBatch(res[0].Messages, sc, copyRetry)
			pending += b.leftPending
		}
		switch {
		case len(b.ack) == 0:
			continue
		case len(b.copies)+len(b.dead) == 0:
			err = rdb.XAck(ctx, key, group, b.ack...).Err()
		default:
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, v := range b.copies {
					p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: v})
				}
				for _, v := range b.dead {
					p.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: v})
				}
				p.XAck(ctx, key, group, b.ack...)
				return nil
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("settle batch: %w", err)
		}
		cnt.add(b.final)
	}
	return nil
}

// rawBatch is what the raw loop writes for one read of new entries.
type rawBatch struct {
	ack          []string // ids to XACK
	copies, dead [][]any  // retry copies and dead letters to XADD, in the XACK's pipeline
	final        int      // messages reaching their final state
	leftPending  int      // ids left unacked, to be read back (retry-once)
}

// sortBatch decides each new entry of one read: first deliveries fail in retry-once (left
// pending, or with copyRetry copied with rc + 1); in dlq-10pct the failing tenth is
// copied with rc + 1, and dead-lettered at attempt 3; everything else is acked.
func sortBatch(msgs []redis.XMessage, sc scenario, copyRetry bool) rawBatch {
	var b rawBatch
	for _, m := range msgs {
		if sc.kind == kindRetry && !copyRetry {
			b.leftPending++
			continue
		}
		p, _ := m.Values["payload"].(string)
		retries := 0
		if v, ok := m.Values["rc"].(string); ok {
			retries, _ = strconv.Atoi(v)
		}
		attempt := retries + 1
		switch {
		case sc.kind == kindRetry && attempt == 1:
			b.copies = append(b.copies, []any{"payload", p, "rc", "1"})
		case sc.kind == kindDLQ && failing(index([]byte(p))) && attempt < 3:
			b.copies = append(b.copies, []any{"payload", p, "rc", strconv.Itoa(attempt)})
		case sc.kind == kindDLQ && failing(index([]byte(p))):
			b.dead = append(b.dead, []any{"payload", p, "rc", strconv.Itoa(attempt)})
			b.final++
		default:
			b.final++
		}
		b.ack = append(b.ack, m.ID)
	}
	return b
}
