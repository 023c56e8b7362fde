package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// riverArgs is a benchmark job: its payload is payload(i), as a string (JSON args of
// about the payload's size).
type riverArgs struct {
	P string `json:"p"`
}

func (riverArgs) Kind() string { return "bench" }

// riverWorker succeeds, or in retry-once fails each job's first attempt.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	retry bool
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	if w.retry && job.Attempt == 1 {
		return errHandler
	}
	return nil
}

// retryAtOnce retries a failed job at once (River's default waits attempt⁴ seconds),
// as settle's Retry does: River then makes the job available in the same update.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now().UTC() }

// runRiver runs one River client (riverpgxv5) with MaxWorkers equal to the scenario's
// Concurrency and the given FetchCooldown (0: River's default), on N jobs inserted
// (InsertManyFast, then ANALYZE) into River's tables, migrated into the run's schema,
// before the timer starts. A job counts when its JobCompleted event arrives (a retry when
// its JobFailed event does): River sends them once the completer has written the job's
// state, as settle's OnSettled comes once the settlement is applied.
func runRiver(cooldown time.Duration) runFunc {
	return func(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
		pcfg, err := pgxpool.ParseConfig(rc.pg.dsn)
		if err != nil {
			return nil, err
		}
		pcfg.MaxConns = int32(rc.pg.conns)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		discard := slog.New(slog.NewTextHandler(io.Discard, nil))
		driver := riverpgxv5.New(pool)
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: discard, Schema: rc.schema})
		if err != nil {
			return nil, err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return nil, fmt.Errorf("river migrate: %w", err)
		}
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverWorker{retry: sc.kind == kindRetry})
		client, err := river.NewClient(driver, &river.Config{
			FetchCooldown: cooldown,
			Logger:        discard,
			Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: sc.workers}},
			RetryPolicy:   retryAtOnce{},
			Schema:        rc.schema,
			Workers:       workers,
		})
		if err != nil {
			return nil, err
		}
		params := make([]river.InsertManyParams, rc.n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: riverArgs{P: string(payload(i))}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return nil, fmt.Errorf("river insert: %w", err)
		}
		if _, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{rc.schema, "river_job"}.Sanitize()); err != nil {
			return nil, err
		}

		cnt := newCounter(rc.n)
		events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
			ChanSize: 2*rc.n + 1, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
		})
		counted := make(chan struct{})
		go func() {
			defer close(counted)
			for ev := range events {
				cnt.settled.Add(1)
				if ev.Kind == river.EventKindJobCompleted {
					cnt.add(1)
				}
			}
		}()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := rc.meter.start(ctx); err != nil {
			return nil, err
		}
		if err := client.Start(runCtx); err != nil {
			return nil, err
		}
		capped := false
		select {
		case <-cnt.done:
		case <-rc.capTimer():
			capped = true
		case <-time.After(rc.timeout):
			err = fmt.Errorf("timed out with %d of %d done", cnt.n.Load(), rc.n)
		}
		s, serr := rc.meter.stop(ctx, rc.done(cnt, sc, capped))
		stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer stopCancel()
		if stopErr := client.Stop(stopCtx); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("river stop: %w", stopErr), client.StopAndCancel(context.WithoutCancel(ctx)))
		}
		unsubscribe()
		<-counted
		if s != nil {
			s.capped = capped
		}
		return s, errors.Join(err, serr)
	}
}
