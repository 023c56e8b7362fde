package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
)

// runLimits measures the flow limits (-limits d): each row runs Apps of their own (one
// client each, sharing the limit's state in Redis as processes do) on one stream for
// about d, and prints what it saw:
//
//   - rate: RateLimit(1000, time.Second) across 4 Apps on a full stream: achieved starts
//     per second, and the most starts in any one-second window;
//   - hot key: RateLimitBy(key, 10, time.Second) with one key published at 100/s (10× its
//     limit) beside 100 cold keys at 1/s each: the cold keys' lateness (handler start −
//     publish), p50 and p99;
//   - slots: ConcurrencyBy(key, 1) across 4 Apps over 1,000 keys, handlers of 1 ms: the
//     most deliveries of one key seen running at once, and the throughput;
//   - cost: drain of n messages by one App at Concurrency(8) with no option, with
//     RateLimit(10⁷, time.Second) and with ConcurrencyBy over 1,000 keys: msgs/s.
//
// -only names the rows to run (rate, hot key, slots, cost).
func runLimits(ctx context.Context, cfg config, d time.Duration) error {
	srv, admin, done, err := redisServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	fmt.Printf("flow limits, %s per row, Apps of their own clients in one process\n\n", d)
	rows := []struct {
		name string
		run  func(context.Context, *server, *redis.Client, config, time.Duration) (string, error)
	}{
		{"rate", limitRate},
		{"hot key", limitHotKey},
		{"slots", limitSlots},
		{"cost", limitCost},
	}
	for _, r := range rows {
		if len(cfg.only) > 0 && !slices.Contains(cfg.only, r.name) {
			continue
		}
		out, err := r.run(ctx, srv, admin, cfg, d)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Printf("| %s | %s |\n", r.name, out)
	}
	return nil
}

// limitApps runs apps Apps, each mounting a Stream of key with h and opts, until ctx
// ends; wait waits for them to return.
func limitApps(ctx context.Context, srv *server, cfg config, apps int, key string, h settle.Handler, opts ...settle.MountOption) (wait func(), err error) {
	var wg sync.WaitGroup
	for range apps {
		rdb := srv.client(cfg.pool)
		app, err := settle.New(settle.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, err
		}
		app.Mount(settle.Stream(rdb, key, "g"), h, opts...)
		if err := app.Validate(); err != nil {
			return nil, err
		}
		wg.Go(func() { _ = app.Run(ctx); _ = rdb.Close() })
	}
	return wg.Wait, nil
}

// fill publishes n messages to key, each with header k set by keyOf(i).
func fill(ctx context.Context, rdb *redis.Client, key string, n int, keyOf func(int) string) error {
	for i := 0; i < n; i += 500 {
		pipe := rdb.Pipeline()
		for j := i; j < min(n, i+500); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", keyOf(j)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func limitRate(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:rate"
	n := int(1000*d.Seconds()) * 2
	if err := fill(ctx, admin, key, n, func(int) string { return "" }); err != nil {
		return "", err
	}
	var mu sync.Mutex
	var starts []time.Time
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	wait, err := limitApps(rctx, srv, cfg, 4, key, h, settle.RateLimit(1000, time.Second))
	if err != nil {
		return "", err
	}
	wait()
	mu.Lock()
	defer mu.Unlock()
	if len(starts) < 2 {
		return "", fmt.Errorf("only %d starts", len(starts))
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	// The first second holds the start-up; rate what came after it.
	from := starts[0].Add(time.Second)
	k := 0
	for k < len(starts) && starts[k].Before(from) {
		k++
	}
	rate := float64(len(starts)-k) / starts[len(starts)-1].Sub(from).Seconds()
	return fmt.Sprintf("RateLimit(1000, 1s), 4 Apps: %.0f starts/s after the first second; most in any 1 s window %d", rate, most), nil
}

func limitHotKey(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:hot"
	var mu sync.Mutex
	var late []time.Duration
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Headers["k"] == "hot" {
			return nil
		}
		at, _ := strconv.ParseInt(m.Headers["at"], 10, 64)
		mu.Lock()
		late = append(late, time.Since(time.Unix(0, at)))
		mu.Unlock()
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, d+2*time.Second)
	defer cancel()
	wait, err := limitApps(rctx, srv, cfg, 4, key, h, settle.RateLimitBy(func(m *settle.Message) string { return m.Headers["k"] }, 10, time.Second))
	if err != nil {
		return "", err
	}
	// Every 10 ms: one hot message (100/s) and one cold one, the 100 cold keys in turn
	// (each at 1/s).
	tick := time.NewTicker(10 * time.Millisecond)
	end := time.After(d)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
		case <-end:
			tick.Stop()
			wait()
			mu.Lock()
			defer mu.Unlock()
			if len(late) == 0 {
				return "", fmt.Errorf("no cold message handled")
			}
			slices.Sort(late)
			return fmt.Sprintf("RateLimitBy(k, 10, 1s), 4 Apps, hot key at 100/s beside 100 cold keys at 1/s: %d cold handled, lateness p50 %s, p99 %s",
				len(late), late[len(late)/2].Round(time.Millisecond/10), late[len(late)*99/100].Round(time.Millisecond/10)), nil
		}
		now := strconv.FormatInt(time.Now().UnixNano(), 10)
		pipe := admin.Pipeline()
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", "hot", "at", now}})
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", "cold-" + strconv.Itoa(i%100), "at", now}})
		if _, err := pipe.Exec(ctx); err != nil {
			return "", err
		}
	}
}

func limitSlots(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:slots"
	if err := fill(ctx, admin, key, 200_000, func(i int) string { return strconv.Itoa(i % 1000) }); err != nil {
		return "", err
	}
	var mu sync.Mutex
	running := map[string]int{}
	most := 0
	var handled atomic.Int64
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		k := m.Headers["k"]
		mu.Lock()
		running[k]++
		most = max(most, running[k])
		mu.Unlock()
		time.Sleep(time.Millisecond) // the handler's work
		mu.Lock()
		running[k]--
		mu.Unlock()
		handled.Add(1)
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	wait, err := limitApps(rctx, srv, cfg, 4, key, h, settle.ConcurrencyBy(func(m *settle.Message) string { return m.Headers["k"] }, 1))
	if err != nil {
		return "", err
	}
	wait()
	return fmt.Sprintf("ConcurrencyBy(k, 1), 4 Apps, 1,000 keys, 1 ms handlers: most of one key at once %d; %.0f msgs/s",
		most, float64(handled.Load())/time.Since(start).Seconds()), nil
}

func limitCost(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	byKey := func(m *settle.Message) string { return m.Headers["k"] }
	variants := []struct {
		name string
		opts []settle.MountOption
	}{
		{"none", nil},
		{"RateLimit(10⁷, 1s)", []settle.MountOption{settle.RateLimit(10_000_000, time.Second)}},
		{"ConcurrencyBy(k, 8), 1,000 keys", []settle.MountOption{settle.ConcurrencyBy(byKey, 8)}},
	}
	var out []string
	for _, v := range variants {
		tok := token()
		key := "{bench-" + tok + "}:cost"
		n := cfg.n
		if err := fill(ctx, admin, key, n, func(i int) string { return strconv.Itoa(i % 1000) }); err != nil {
			return "", err
		}
		var handled atomic.Int64
		all := make(chan struct{})
		h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
			if handled.Add(1) == int64(n) {
				close(all)
			}
			return nil
		})
		rctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		wait, err := limitApps(rctx, srv, cfg, 1, key, h, append(v.opts, settle.Concurrency(8))...)
		if err != nil {
			cancel()
			return "", err
		}
		select {
		case <-all:
		case <-time.After(d * 10):
		}
		took := time.Since(start)
		cancel()
		wait()
		_, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok)
		out = append(out, fmt.Sprintf("%s %.0f msgs/s", v.name, float64(handled.Load())/took.Seconds()))
	}
	return fmt.Sprintf("drain-8 of %d: %s", cfg.n, strings.Join(out, "; ")), nil
}
