package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
)

// runLimits measures the flow limits (-limits d): the first three rows run 4 consumer
// processes of their own (see limitsproc.go), sharing the limit's state in Redis, on one
// stream for about d, and print what they saw:
//
//   - rate: RateLimit(1000, time.Second) on a full stream: achieved starts per second,
//     and the most starts in any one-second window;
//   - hot key: RateLimitBy(key, 10, time.Second) with one key published at 100/s (10× its
//     limit) beside 100 cold keys at 1/s each: the cold keys' lateness (handler start −
//     publish), p50 and p99;
//   - slots: ConcurrencyBy(key, 1) over 1,000 keys, handlers of 1 ms: the most
//     deliveries of one key seen running at once (start to end, across the processes),
//     and the throughput;
//   - cost: drain of n messages by one App in this process at Concurrency(8), with no
//     option and with each option at its defaults, limits that never bind: msgs/s and
//     Redis commands per message (INFO commandstats, those a script runs included).
//
// -only names the rows to run (rate, hot key, slots, cost).
func runLimits(ctx context.Context, cfg config, d time.Duration) error {
	srv, admin, done, err := redisServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("flow limits, %s per row, 4 consumer processes (rate, hot key, slots); load average at start %s\n", d, strings.Join(strings.Fields(string(load))[:3], " "))
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
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Printf("| %s | %s | load %s |\n", r.name, out, strings.Join(strings.Fields(string(load))[:3], " "))
	}
	return nil
}

// processes is how many consumer processes the rate, hot key and slots rows run.
const processes = 4

// startup is how long the consumer processes are given to start before a row counts.
const startup = 2 * time.Second

// limitApps runs apps Apps in this process, each with a client of its own mounting a
// Stream of key with h and opts, until ctx ends; wait waits for them to return.
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

// ints64 parses lines of one integer each.
func ints64(lines []string) []int64 {
	out := make([]int64, 0, len(lines))
	for _, l := range lines {
		if v, err := strconv.ParseInt(l, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

func limitRate(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:rate"
	n := int(1000*(d+startup).Seconds()) * 2
	if err := fill(ctx, admin, key, n, func(int) string { return "" }); err != nil {
		return "", err
	}
	_, wait, err := children(ctx, srv, "rate", key, processes, time.Now().Add(startup+d))
	if err != nil {
		return "", err
	}
	lines, err := wait()
	if err != nil {
		return "", err
	}
	starts := ints64(lines)
	if len(starts) < 2 {
		return "", fmt.Errorf("only %d starts", len(starts))
	}
	slices.Sort(starts)
	most, j := 0, 0
	for i := range starts {
		for starts[i]-starts[j] >= int64(time.Second) {
			j++
		}
		most = max(most, i-j+1)
	}
	span := time.Duration(starts[len(starts)-1] - starts[0])
	// The first second holds the start-up; rate what came after it too.
	from := starts[0] + int64(time.Second)
	k, _ := slices.BinarySearch(starts, from)
	after := float64(len(starts)-k) / time.Duration(starts[len(starts)-1]-from).Seconds()
	// Starts per second in each 5 s from the first (the last part by its own length):
	// whether the rate holds over the run, as the machine's load moves.
	var per5 []string
	for at := starts[0]; at < starts[len(starts)-1]; at += int64(5 * time.Second) {
		i, _ := slices.BinarySearch(starts, at)
		j, _ := slices.BinarySearch(starts, at+int64(5*time.Second))
		secs := min(5*time.Second, time.Duration(starts[len(starts)-1]-at)).Seconds()
		per5 = append(per5, strconv.Itoa(int(float64(j-i)/secs)))
	}
	return fmt.Sprintf("RateLimit(1000, 1s), %d processes: %d starts in %.1f s, %.0f/s (%.0f/s after the first second; per second in each 5 s: %s); most in any 1 s window %d",
		processes, len(starts), span.Seconds(), float64(len(starts))/span.Seconds(), after, strings.Join(per5, " "), most), nil
}

func limitHotKey(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:hot"
	// The group exists before the first publish: the processes read from its start.
	if err := admin.XGroupCreateMkStream(ctx, key, "g", "0").Err(); err != nil {
		return "", err
	}
	ready, wait, err := children(ctx, srv, "hot", key, processes, time.Now().Add(startup+d+2*time.Second))
	if err != nil {
		return "", err
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	time.Sleep(startup / 2) // the Apps' first reads
	// Every 10 ms: one hot message (100/s) and one cold one, the 100 cold keys in turn
	// (each at 1/s).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	end := time.After(d)
loop:
	for i := 0; ; i++ {
		select {
		case <-tick.C:
		case <-end:
			break loop
		}
		now := strconv.FormatInt(time.Now().UnixNano(), 10)
		pipe := admin.Pipeline()
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", "hot", "at", now}})
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", "cold-" + strconv.Itoa(i%100), "at", now}})
		if _, err := pipe.Exec(ctx); err != nil {
			return "", err
		}
	}
	lines, err := wait()
	if err != nil {
		return "", err
	}
	late := ints64(lines)
	if len(late) == 0 {
		return "", fmt.Errorf("no cold message handled")
	}
	slices.Sort(late)
	q := func(p int) time.Duration { return time.Duration(late[len(late)*p/100]).Round(time.Millisecond / 10) }
	return fmt.Sprintf("RateLimitBy(k, 10, 1s), %d processes, hot key at 100/s beside 100 cold keys at 1/s: %d cold handled, lateness p50 %s, p99 %s, max %s",
		processes, len(late), q(50), q(99), time.Duration(late[len(late)-1]).Round(time.Millisecond/10)), nil
}

func limitSlots(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	tok := token()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	key := "{bench-" + tok + "}:slots"
	if err := fill(ctx, admin, key, 500_000, func(i int) string { return strconv.Itoa(i % 1000) }); err != nil {
		return "", err
	}
	ready, wait, err := children(ctx, srv, "slots", key, processes, time.Now().Add(startup+d))
	if err != nil {
		return "", err
	}
	<-ready
	lines, err := wait()
	if err != nil {
		return "", err
	}
	// Per key, the most of its deliveries whose [start, end] overlap at once.
	type ev struct {
		at    int64
		delta int
	}
	byKey := map[string][]ev{}
	var first, last int64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		s, _ := strconv.ParseInt(f[1], 10, 64)
		e, _ := strconv.ParseInt(f[2], 10, 64)
		byKey[f[0]] = append(byKey[f[0]], ev{s, 1}, ev{e, -1})
		if first == 0 || s < first {
			first = s
		}
		last = max(last, e)
	}
	most := 0
	for _, evs := range byKey {
		slices.SortFunc(evs, func(a, b ev) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return b.delta - a.delta // a start at another's end counts as overlapping
		})
		cur := 0
		for _, e := range evs {
			cur += e.delta
			most = max(most, cur)
		}
	}
	handled := len(lines)
	return fmt.Sprintf("ConcurrencyBy(k, 1), %d processes, 1,000 keys, 1 ms handlers: %d handled, most of one key at once %d; %.0f msgs/s",
		processes, handled, most, float64(handled)/time.Duration(last-first).Seconds()), nil
}

func limitCost(ctx context.Context, srv *server, admin *redis.Client, cfg config, d time.Duration) (string, error) {
	byKey := func(m *settle.Message) string { return m.Headers["k"] }
	byID := func(m *settle.Message) string { return m.Headers["id"] }
	variants := []struct {
		name string
		opts []settle.MountOption
	}{
		{"none", nil},
		{"RateLimit(10⁷, 1s)", []settle.MountOption{settle.RateLimit(10_000_000, time.Second)}},
		{"RateLimitBy(k, 10⁷, 1s), 1,000 keys", []settle.MountOption{settle.RateLimitBy(byKey, 10_000_000, time.Second)}},
		{"ConcurrencyBy(k, 8), 1,000 keys", []settle.MountOption{settle.ConcurrencyBy(byKey, 8)}},
		{"GlobalConcurrency(8)", []settle.MountOption{settle.GlobalConcurrency(8)}},
		{"Dedupe(1h, id), every key new", []settle.MountOption{settle.Dedupe(time.Hour, byID)}},
	}
	var out []string
	for _, v := range variants {
		tok := token()
		key := "{bench-" + tok + "}:cost"
		n := cfg.n
		if err := fillCost(ctx, admin, key, n); err != nil {
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
		m := &meter{admin: admin, serverCPU: func() (time.Duration, error) { return serverCPU(srv.pid) }}
		if err := m.start(ctx); err != nil {
			return "", err
		}
		rctx, cancel := context.WithCancel(ctx)
		wait, err := limitApps(rctx, srv, cfg, 1, key, h, append(v.opts, settle.Concurrency(8))...)
		if err != nil {
			cancel()
			return "", err
		}
		select {
		case <-all:
		case <-time.After(d * 10):
		}
		s, err := m.stop(ctx, int(handled.Load()))
		cancel()
		wait()
		_, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok)
		if err != nil {
			return "", err
		}
		scripts := s.cmds["evalsha"] + s.cmds["eval"]
		out = append(out, fmt.Sprintf("%s %.0f msgs/s, %.2f cmds/msg (%.2f scripts)", v.name, float64(s.msgs)/s.elapsed.Seconds(),
			float64(s.totalCmds())/float64(s.msgs), float64(scripts)/float64(s.msgs)))
	}
	return fmt.Sprintf("drain-8 of %d, one App: %s", cfg.n, strings.Join(out, "; ")), nil
}

// fillCost publishes n messages to key, message i with headers k (i mod 1,000) and id (i).
func fillCost(ctx context.Context, rdb *redis.Client, key string, n int) error {
	for i := 0; i < n; i += 500 {
		pipe := rdb.Pipeline()
		for j := i; j < min(n, i+500); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"payload", "x", "k", strconv.Itoa(j % 1000), "id", strconv.Itoa(j)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}
