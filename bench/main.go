// Command bench measures settle's Redis consumers against the raw go-redis loop (the
// practical limit of a stream consumer) and against peer libraries (asynq,
// watermill-redisstream), in one process against one Redis, and prints a table per
// scenario and a table of ratios.
//
//	cd bench && go run . -n 50000
//	cd bench && go run . -spawn -n 50000        # its own redis-server, nothing else on it
//	cd bench && go run . -n 2000 -runs 1 -only settle-stream,raw -scenarios drain-8
//
// Every run uses keys of its own (a unique token in every name) and deletes them after;
// nothing is flushed, so a shared server is safe, but other clients' commands and CPU
// then count in the Redis figures: use -spawn for clean ones.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// kind is what a scenario's handler does.
type kind int

const (
	kindDrain kind = iota
	kindRetry
	kindDelay
	kindDLQ
)

// scenario is one workload.
type scenario struct {
	name    string
	kind    kind
	workers int
	about   string
}

// runCtx is what one run of one system gets.
type runCtx struct {
	concurrency int
	meter       *meter
	n           int
	pool        int
	prefix      string // every key of the run starts with it
	srv         *server
	timeout     time.Duration
	tok         string // in every key of the run
}

// client returns a new client of the server with the -pool size.
func (rc *runCtx) client() *redis.Client { return rc.srv.client(rc.pool) }

// runFunc runs one system on one scenario once.
type runFunc func(ctx context.Context, rc *runCtx, sc scenario) (*sample, error)

// naError says a system cannot express a scenario.
type naError string

func (e naError) Error() string { return "n/a: " + string(e) }

func errNA(why string) error { return naError(why) }

// system is one consumer under test.
type system struct {
	name   string
	settle bool
	run    runFunc
}

func systems() []system {
	return []system{
		{name: "raw", run: runRaw},
		{name: "raw-copy", run: runRawCopy},
		{name: "settle-stream", settle: true, run: runSettle(settleStream)},
		{name: "settle-stream-zset", settle: true, run: runSettle(settleStreamZset)},
		{name: "settle-claiming", settle: true, run: runSettle(settleClaiming)},
		{name: "settle-reliable-list", settle: true, run: runSettle(settleReliableList)},
		{name: "asynq", run: runAsynq},
		{name: "watermill", run: runWatermill},
	}
}

func scenarios(k int) []scenario {
	return []scenario{
		{name: "drain-1", kind: kindDrain, workers: 1, about: "drain N published messages, 1 worker"},
		{name: "drain-8", kind: kindDrain, workers: 8, about: "drain N published messages, 8 workers"},
		{name: "retry-once", kind: kindRetry, workers: k, about: fmt.Sprintf("every message retried once at once, %d workers", k)},
		{name: "delay-1s", kind: kindDelay, workers: k, about: fmt.Sprintf("every message retried once after 1s, %d workers", k)},
		{name: "dlq-10pct", kind: kindDLQ, workers: k, about: fmt.Sprintf("10%% of messages fail every time, dead-lettered at attempt 3, %d workers", k)},
	}
}

func main() {
	var (
		n           = flag.Int("n", 50000, "messages per run")
		runs        = flag.Int("runs", 3, "runs per row; every figure is the median")
		redisURL    = flag.String("redis", "redis://127.0.0.1:6379/0", "the Redis to run against")
		spawnFlag   = flag.Bool("spawn", false, "start a redis-server of its own on a free loopback port (no persistence) instead of -redis")
		k           = flag.Int("k", 8, "workers of the retry, delay and dead-letter scenarios")
		concurrency = flag.Int("concurrency", 200, "settle: Concurrency of each worker's mount; 2×Batch lets a full read start while the last batch finishes (reads ask for at most the free slots)")
		pool        = flag.Int("pool", 0, "go-redis PoolSize of every system's client (0: the go-redis default, 10 per CPU)")
		only        = flag.String("only", "", "comma-separated systems to run (default all)")
		scens       = flag.String("scenarios", "", "comma-separated scenarios to run (default all)")
		cpuprofile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		memprofile  = flag.String("memprofile", "", "write an allocation profile of the whole run to this file at the end")
		timeout     = flag.Duration("timeout", 5*time.Minute, "give up on one run after this long")
		verbose     = flag.Bool("v", false, "print each run and its commands per message")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, config{
		n: *n, runs: *runs, redisURL: *redisURL, spawn: *spawnFlag, k: *k, concurrency: *concurrency, pool: *pool,
		only: split(*only), scenarios: split(*scens), cpuprofile: *cpuprofile, memprofile: *memprofile, timeout: *timeout, verbose: *verbose,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	n, runs, k, concurrency, pool int
	redisURL                      string
	spawn, verbose                bool
	only, scenarios               []string
	cpuprofile, memprofile        string
	timeout                       time.Duration
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(ctx context.Context, cfg config) error {
	var srv *server
	var err error
	if cfg.spawn {
		srv, err = spawn(ctx)
	} else {
		srv, err = connect(ctx, cfg.redisURL)
	}
	if err != nil {
		return err
	}
	defer srv.stop()
	admin := srv.client(2)
	defer admin.Close()

	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	if cfg.memprofile != "" {
		defer func() {
			f, err := os.Create(cfg.memprofile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: memprofile:", err)
				return
			}
			defer f.Close()
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
		}()
	}

	printHeader(ctx, cfg, srv, admin)
	res := results{}
	for _, sc := range scenarios(cfg.k) {
		if len(cfg.scenarios) > 0 && !slices.Contains(cfg.scenarios, sc.name) {
			continue
		}
		for _, sys := range systems() {
			if len(cfg.only) > 0 && !slices.Contains(cfg.only, sys.name) {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r := row{system: sys, scenario: sc}
			for i := range cfg.runs {
				tok := token()
				rc := &runCtx{
					concurrency: cfg.concurrency, meter: &meter{admin: admin, pid: srv.pid}, n: cfg.n, pool: cfg.pool,
					prefix: "bench:{" + tok + "}:", srv: srv, timeout: cfg.timeout, tok: tok,
				}
				s, err := sys.run(ctx, rc, sc)
				if _, err := deleteKeys(context.WithoutCancel(ctx), admin, tok); err != nil {
					fmt.Fprintf(os.Stderr, "bench: delete keys of %s: %v\n", tok, err)
				}
				var na naError
				if errors.As(err, &na) {
					r.na = string(na)
					break
				}
				if err != nil {
					r.err = err
					fmt.Fprintf(os.Stderr, "bench: %s %s run %d: %v\n", sys.name, sc.name, i+1, err)
					break
				}
				r.samples = append(r.samples, s)
				if cfg.verbose {
					late := ""
					if len(s.late) > 0 {
						late = fmt.Sprintf(" late p50 %s p99 %s;", percentile(s.late, 0.50).Round(100*time.Microsecond), percentile(s.late, 0.99).Round(100*time.Microsecond))
					}
					fmt.Fprintf(os.Stderr, "  %-20s %-10s run %d: %8.0f msgs/s%s %6.3f cmds/msg:%s\n", sys.name, sc.name, i+1,
						float64(s.msgs)/s.elapsed.Seconds(), late, float64(s.totalCmds())/float64(s.msgs), topCommands(s.cmds, s.msgs))
				}
			}
			res = append(res, r)
		}
		res.printScenario(os.Stdout, sc)
	}
	res.printRatios(os.Stdout)
	return nil
}

func printHeader(ctx context.Context, cfg config, srv *server, admin *redis.Client) {
	info, _ := admin.Info(ctx, "server").Result()
	where := redactURL(cfg.redisURL)
	if cfg.spawn {
		where = "own redis-server at " + srv.opts.Addr
	}
	cpuNote := "redis-server CPU from /proc/" + fmt.Sprint(srv.pid) + "/stat"
	if srv.pid == 0 {
		cpuNote = "redis-server CPU unknown (server not local)"
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("settle bench: N=%d messages of %d bytes, median of %d runs; Redis %s (%s); %s\n",
		cfg.n, payloadSize, cfg.runs, infoField(info, "redis_version"), where, cpuNote)
	fmt.Printf("machine: %s/%s, %d CPUs (%s), %s; load average %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Printf("settle: one mount per worker, Concurrency(%d) each; asynq: one server per worker, Concurrency 50, DelayedTaskCheckInterval %s; watermill: one subscriber per worker, one group; claiming stream min-idle %s\n\n",
		cfg.concurrency, asynqCheckInterval, claimMinIdle)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}
