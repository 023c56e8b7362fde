package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/hibiken/asynq"
)

// asynqCheckInterval is how often asynq moves due retries and scheduled tasks back to
// pending (its DelayedTaskCheckInterval; asynq's default is 5s, which would dominate the
// retry and delay rows).
const asynqCheckInterval = 100 * time.Millisecond

// runAsynq runs K asynq servers (one per worker), Concurrency 50 each, on one queue of
// N tasks enqueued beforehand. A retry is a handler error with a retry delay of 0 (or 1s
// for the delay scenario); a dead letter is asynq's archive after MaxRetry(2).
func runAsynq(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	rdb := rc.client()
	defer rdb.Close()
	queue := "bench-" + rc.tok
	maxRetry := 1
	if sc.kind == kindDLQ {
		maxRetry = 2
	}
	if err := enqueueAsynq(ctx, asynq.NewClientFromRedisClient(rdb), queue, rc.n, maxRetry); err != nil {
		return nil, err
	}
	defer func() {
		_ = asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(queue, true)
		_ = rdb.SRem(context.WithoutCancel(ctx), "asynq:queues", queue).Err()
	}()

	cnt := newCounter(rc.n)
	late := newLateness(rc.n)
	h := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		retried, _ := asynq.GetRetryCount(ctx)
		maxR, _ := asynq.GetMaxRetry(ctx)
		idx := index(t.Payload())
		switch sc.kind {
		case kindRetry:
			if retried == 0 {
				return errHandler
			}
		case kindDelay:
			if retried == 0 {
				late.setDue(idx, time.Now().Add(time.Second))
				return errHandler
			}
			late.seen(idx, time.Now())
		case kindDLQ:
			if failing(idx) {
				if retried >= maxR {
					cnt.add(1) // archived once this returns
				}
				return errHandler
			}
		}
		cnt.add(1)
		return nil
	})
	delay := time.Duration(0)
	if sc.kind == kindDelay {
		delay = time.Second
	}
	var servers []*asynq.Server
	if err := rc.meter.start(ctx); err != nil {
		return nil, err
	}
	for range sc.workers {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency:              50,
			Queues:                   map[string]int{queue: 1},
			RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return delay },
			DelayedTaskCheckInterval: asynqCheckInterval,
			Logger:                   nopLogger{},
			LogLevel:                 asynq.FatalLevel,
			ShutdownTimeout:          5 * time.Second,
		})
		if err := srv.Start(h); err != nil {
			return nil, err
		}
		servers = append(servers, srv)
	}
	var err error
	select {
	case <-cnt.done:
	case <-time.After(rc.timeout):
		err = fmt.Errorf("timed out with %d of %d done", cnt.n.Load(), rc.n)
	}
	s, serr := rc.meter.stop(ctx, rc.n)
	for _, srv := range servers {
		srv.Shutdown()
	}
	if s != nil {
		s.late, _ = late.values()
	}
	return s, errors.Join(err, serr)
}

// enqueueAsynq enqueues n tasks from 8 goroutines (asynq has no batch enqueue).
func enqueueAsynq(ctx context.Context, c *asynq.Client, queue string, n, maxRetry int) error {
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				_, err := c.EnqueueContext(ctx, asynq.NewTask("bench", payload(i)), asynq.Queue(queue), asynq.MaxRetry(maxRetry))
				if err != nil {
					errs <- fmt.Errorf("asynq enqueue: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type nopLogger struct{}

func (nopLogger) Debug(...any) {}
func (nopLogger) Info(...any)  {}
func (nopLogger) Warn(...any)  {}
func (nopLogger) Error(...any) {}
func (nopLogger) Fatal(...any) {}

// runWatermill runs K watermill-redisstream subscribers in one consumer group on a
// stream of N messages in watermill's format. A retry is a Nack (redelivered at once,
// NackResendSleep NoSleep). Watermill has no delayed redelivery nor dead letter in the
// subscriber itself.
func runWatermill(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	switch sc.kind {
	case kindDelay:
		return nil, errNA("no delayed redelivery in watermill-redisstream")
	case kindDLQ:
		return nil, errNA("no attempts cap in the subscriber (a router middleware retries in process)")
	}
	rdb := rc.client()
	defer rdb.Close()
	key := rc.prefix + "in"
	err := publishStream(ctx, rdb, key, rc.n, func(i int) []any {
		return []any{redisstream.UUIDHeaderKey, strconv.Itoa(i), "payload", payload(i)}
	})
	if err != nil {
		return nil, err
	}
	cnt := newCounter(rc.n)
	nacked := make([]atomic.Bool, rc.n)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := rc.meter.start(ctx); err != nil {
		return nil, err
	}
	var subs []*redisstream.Subscriber
	var wg sync.WaitGroup
	for w := range sc.workers {
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:                        rdb,
			Consumer:                      fmt.Sprintf("c%d", w),
			ConsumerGroup:                 "g",
			NackResendSleep:               redisstream.NoSleep,
			DisableIndefiniteInitialBlock: true,
		}, nil)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
		msgs, err := sub.Subscribe(runCtx, key)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for m := range msgs {
				idx := index(m.Payload)
				if sc.kind == kindRetry && idx >= 0 && !nacked[idx].Swap(true) {
					m.Nack()
					continue
				}
				m.Ack()
				cnt.add(1)
			}
		})
	}
	select {
	case <-cnt.done:
	case <-time.After(rc.timeout):
		err = fmt.Errorf("timed out with %d of %d done", cnt.n.Load(), rc.n)
	}
	s, serr := rc.meter.stop(ctx, rc.n)
	cancel()
	for _, sub := range subs {
		_ = sub.Close()
	}
	wg.Wait()
	return s, errors.Join(err, serr)
}
