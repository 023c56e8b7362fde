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

// runRaw is the practical limit of a stream consumer: K goroutines, each one consumer of
// one group, reading XREADGROUP COUNT 100 and sending one XACK per batch. A retry appends
// a copy (field rc = retry count) and a dead letter appends to the dead-letter stream, in
// the same pipeline as the batch's XACK (not atomic: the limit, not a safe consumer).
func runRaw(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
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
			if err := rawWorker(runCtx, rdb, key, dlq, group, fmt.Sprintf("c%d", w), sc, cnt); err != nil {
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

func rawWorker(ctx context.Context, rdb *redis.Client, key, dlq, group, consumer string, sc scenario, cnt *counter) error {
	ids := make([]string, 0, 100)
	for ctx.Err() == nil {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: consumer, Streams: []string{key, ">"}, Count: 100, Block: 100 * time.Millisecond,
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
		ids = ids[:0]
		var copies, dead [][]any
		final := 0
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
			p, _ := m.Values["payload"].(string)
			retries := 0
			if v, ok := m.Values["rc"].(string); ok {
				retries, _ = strconv.Atoi(v)
			}
			attempt := retries + 1
			switch {
			case sc.kind == kindRetry && attempt == 1,
				sc.kind == kindDLQ && failing(index([]byte(p))) && attempt < 3:
				copies = append(copies, []any{"payload", p, "rc", strconv.Itoa(attempt)})
			case sc.kind == kindDLQ && failing(index([]byte(p))):
				dead = append(dead, []any{"payload", p, "rc", strconv.Itoa(attempt)})
				final++
			default:
				final++
			}
		}
		if len(copies)+len(dead) == 0 {
			err = rdb.XAck(ctx, key, group, ids...).Err()
		} else {
			_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, v := range copies {
					p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: v})
				}
				for _, v := range dead {
					p.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: v})
				}
				p.XAck(ctx, key, group, ids...)
				return nil
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("settle batch: %w", err)
		}
		cnt.add(final)
	}
	return nil
}
