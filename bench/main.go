// Command bench measures settle's consumers as users run them (the defaults,
// Concurrency(1), Concurrency(8)) and tuned, against the raw go-redis loop (the practical
// limit of a stream consumer) and against peer libraries: asynq and watermill-redisstream
// on Redis, in one process against one Redis; and settle's SQL inbox against River on
// PostgreSQL. It prints a table per scenario, a table of ratios and the targets.
//
//	cd bench && go run . -spawn -n 50000        # everything; its own redis-server
//	cd bench && go run . -n 50000               # the Redis at -redis
//	cd bench && go run . -n 2000 -runs 1 -only 'raw,settle-stream-*' -scenarios drain-8
//	cd bench && go run . -only 'settle-inbox*,river-*' -scenarios 'sql-*'   # PostgreSQL only
//	cd bench && go run . -spawn -movecost 125 -runs 9           # what one retry copy costs the server, three ways
//	cd bench && go run . -spawn -idle 60s -idlemounts 1,100   # what idle mounts cost
//	cd bench && go run . -spawn -limits 30s -n 50000          # the flow limits' rows
//	cd bench && go run . -partitions 16 -n 50000              # one stream vs a partitioned one on clusters of 1, 2, 3 masters
//
// Every Redis run uses keys of its own (a unique token in every name) and deletes them
// after; nothing is flushed, so a shared server is safe, but other clients' commands and
// CPU then count in the Redis figures: use -spawn for clean ones. Every SQL run creates a
// schema of its own (settle's table, or River's migrations) and drops it after.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
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
	sql     bool // a PostgreSQL scenario: workers is the Concurrency (River's MaxWorkers)
	workers int
	about   string
}

// runCtx is what one run of one system gets.
type runCtx struct {
	capAfter time.Duration // SQL rows: stop after this long and rate what was done; 0: none
	meter    *meter
	n        int
	pg       *pgServer // SQL rows
	pool     int
	prefix   string  // every key of the run starts with it
	schema   string  // SQL rows: the run's own schema, created before and dropped after
	srv      *server // Redis rows
	timeout  time.Duration
	tok      string // in every key and schema name of the run
}

// client returns a new client of the server with the -pool size.
func (rc *runCtx) client() *redis.Client { return rc.srv.client(rc.pool) }

// capTimer fires when the run's cap passes (never without one).
func (rc *runCtx) capTimer() <-chan time.Time {
	if rc.capAfter <= 0 {
		return nil
	}
	return time.After(rc.capAfter)
}

// done is how many messages a run counts: all of them; or, when it ended at its cap, those
// final by then, and in retry-once half the deliveries settled by then (each message
// takes two): a queue that takes retries after every first delivery (River) has none
// final until its first pass ends, one that takes them first (the inbox) has many.
func (rc *runCtx) done(cnt *counter, sc scenario, capped bool) int {
	switch {
	case !capped:
		return rc.n
	case sc.kind == kindRetry:
		return int(min(cnt.settled.Load()/2, int64(rc.n)))
	default:
		return int(min(cnt.n.Load(), int64(rc.n)))
	}
}

// runFunc runs one system on one scenario once.
type runFunc func(ctx context.Context, rc *runCtx, sc scenario) (*sample, error)

// naError says a system cannot express a scenario.
type naError string

func (e naError) Error() string { return "n/a: " + string(e) }

func errNA(why string) error { return naError(why) }

// system is one consumer under test, with the options its name says.
type system struct {
	name    string
	settle  bool
	sql     bool                     // runs in the PostgreSQL scenarios only
	fits    func(sc scenario) bool   // whether it runs in sc at all; nil: every scenario
	options func(sc scenario) string // what it runs with in sc, printed beside its figures
	run     runFunc
}

func systems(cfg config) []system {
	k := func(format string) func(sc scenario) string {
		return func(sc scenario) string { return fmt.Sprintf(format, sc.workers) }
	}
	out := []system{
		{name: "raw", options: k("K=%d goroutines, XREADGROUP COUNT 100"), run: runRaw},
		{name: "raw-copy", fits: func(sc scenario) bool { return sc.kind == kindRetry },
			options: k("K=%d goroutines, a retry is XADD copy + XACK, pipelined"), run: runRawCopy},
	}
	for _, src := range []struct {
		name string
		kind settleKind
	}{
		{"settle-stream", settleStream},
		{"settle-stream-zset", settleStreamZset},
		{"settle-claiming", settleClaiming},
		{"settle-reliable-list", settleReliableList},
	} {
		for _, o := range settleOptionRows(cfg.concurrency) {
			out = append(out, system{
				name: src.name + "-" + o.name, settle: true,
				fits:    func(sc scenario) bool { return o.fits(src.kind, sc) },
				options: func(sc scenario) string { return o.describe(src.kind, sc) },
				run:     runSettle(src.kind, o),
			})
		}
	}
	out = append(out,
		system{name: "asynq", options: k("%d server(s), Concurrency 50 each"), run: runAsynq},
		system{name: "watermill", options: k("%d subscriber(s), one group"), run: runWatermill},
		system{name: "settle-inbox", settle: true, sql: true, options: func(sc scenario) string {
			return fmt.Sprintf("1 mount, Concurrency(%d), inbox defaults", sc.workers)
		}, run: runInbox},
		system{name: "settle-inbox-indexed", settle: true, sql: true, options: func(sc scenario) string {
			return fmt.Sprintf("1 mount, Concurrency(%d), inbox defaults, the README's table (index on name, retry_after, id; last_error, dead_at)", sc.workers)
		}, run: runInboxIndexed},
		system{name: "river-cooldown-1ms", sql: true, options: func(sc scenario) string {
			return fmt.Sprintf("MaxWorkers %d, FetchCooldown 1ms", sc.workers)
		}, run: runRiver(time.Millisecond)},
		system{name: "river-default", sql: true, options: func(sc scenario) string {
			return fmt.Sprintf("MaxWorkers %d, FetchCooldown 100ms (default)", sc.workers)
		}, run: runRiver(0)},
	)
	return out
}

func scenarios(k int, sqlConc []int) []scenario {
	out := []scenario{
		{name: "drain-1", kind: kindDrain, workers: 1, about: "drain N published messages, 1 worker"},
		{name: "drain-8", kind: kindDrain, workers: 8, about: "drain N published messages, 8 workers"},
		{name: "retry-once", kind: kindRetry, workers: k, about: fmt.Sprintf("every message retried once at once, %d workers", k)},
		{name: "delay-1s", kind: kindDelay, workers: k, about: fmt.Sprintf("every message retried once after 1s, %d workers", k)},
		{name: "dlq-10pct", kind: kindDLQ, workers: k, about: fmt.Sprintf("10%% of messages fail every time, dead-lettered at attempt 3, %d workers", k)},
	}
	for _, kd := range []kind{kindDrain, kindRetry} {
		for _, c := range sqlConc {
			sc := scenario{kind: kd, sql: true, workers: c}
			if kd == kindDrain {
				sc.name, sc.about = fmt.Sprintf("sql-drain-%d", c), fmt.Sprintf("drain N published rows, Concurrency %d", c)
			} else {
				sc.name, sc.about = fmt.Sprintf("sql-retry-once-%d", c), fmt.Sprintf("every row retried once at once, Concurrency %d", c)
			}
			out = append(out, sc)
		}
	}
	return out
}

func main() {
	var (
		n           = flag.Int("n", 50000, "messages per Redis run")
		runs        = flag.Int("runs", 3, "runs per Redis row; every figure is the median")
		redisURL    = flag.String("redis", "redis://127.0.0.1:6379/0", "the Redis to run against")
		spawnFlag   = flag.Bool("spawn", false, "start a redis-server of its own on a free loopback port (no persistence) instead of -redis")
		k           = flag.Int("k", 8, "workers of the retry, delay and dead-letter scenarios")
		concurrency = flag.Int("concurrency", 200, "settle's tuned rows: Concurrency of each worker's mount (one mount per worker); 2×Batch lets a full read start while the last batch finishes")
		pool        = flag.Int("pool", 0, "go-redis PoolSize of every system's client (0: the go-redis default, 10 per CPU)")
		pg          = flag.String("pg", "postgres://root@127.0.0.1:5432/test?sslmode=disable", "the PostgreSQL of the SQL rows (skipped when it does not connect)")
		pgConns     = flag.Int("pgconns", 10, "connections of each SQL row's pool (database/sql MaxOpenConns, pgxpool MaxConns)")
		sqlN        = flag.Int("sqln", 10000, "rows per SQL run")
		sqlRuns     = flag.Int("sqlruns", 3, "runs per SQL row; every figure is the median")
		sqlCap      = flag.Duration("sqlcap", 5*time.Second, "end a SQL run after this long and rate the rows done by then (River's FetchCooldown bounds its rate at low MaxWorkers)")
		sqlConc     = flag.String("sqlconc", "1,8,100", "comma-separated Concurrency (River: MaxWorkers) of the SQL scenarios")
		only        = flag.String("only", "", "comma-separated systems to run, each a name or a pattern (path.Match: settle-stream-*) (default all)")
		scens       = flag.String("scenarios", "", "comma-separated scenarios to run, names or patterns (sql-*) (default all)")
		cpuprofile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
		memprofile  = flag.String("memprofile", "", "write an allocation profile of the whole run to this file at the end")
		timeout     = flag.Duration("timeout", 5*time.Minute, "give up on one run after this long")
		verbose     = flag.Bool("v", false, "print each run and its commands per message")
		moveCost    = flag.Int("movecost", 0, "instead of the scenarios, measure what one retry copy costs the server (-n pending entries, moved in batches of this many): a pipeline, the least Lua script, settle's stream_move")
		idle        = flag.Duration("idle", 0, "instead of the scenarios, watch idle mounts of each transport (-only: stream, claiming-stream, list, reliable-list, pubsub, pubsub-pattern) for this long (see -idlemounts)")
		idleMounts  = flag.String("idlemounts", "1,100", "comma-separated numbers of idle mounts in one App (with -idle)")
		limits      = flag.Duration("limits", 0, "instead of the scenarios, measure the flow limits (RateLimit, RateLimitBy, ConcurrencyBy), each row for about this long")
		limitChildR = flag.String("limitchild", "", "internal: run as one consumer process of this flow-limit row (see limitsproc.go)")
		limitKey    = flag.String("limitkey", "", "internal: the -limitchild's stream")
		limitEnd    = flag.Int64("limitend", 0, "internal: when the -limitchild stops, in Unix ns")
		partitions  = flag.Int("partitions", 0, "instead of the scenarios, drain one Stream and a PartitionedStream with this many partitions on local clusters of their own (see -masters, -procs, -partidle, -pin)")
		masters     = flag.String("masters", "1,2,3", "with -partitions: comma-separated cluster sizes (masters), one cluster of each in turn")
		procs       = flag.Int("procs", 2, "with -partitions: consumer processes of each drain")
		partIdle    = flag.Duration("partidle", 10*time.Second, "with -partitions: watch one idle partitioned mount this long on each cluster (0: not)")
		pin         = flag.Bool("pin", false, "with -partitions: run master i under taskset on CPU i mod the CPUs")
		partChildK  = flag.String("partchild", "", "internal: run as one consumer process of a -partitions row: stream or partitioned (see partproc.go)")
		partAddrs   = flag.String("partaddrs", "", "internal: the -partchild's cluster masters, comma-separated")
		partKey     = flag.String("partkey", "", "internal: the -partchild's stream or partitioned stream")
		partMember  = flag.String("partmember", "", "internal: the -partchild's consumer name")
	)
	flag.Parse()
	conc, err := ints(*sqlConc)
	if err == nil {
		_, err = ints(*idleMounts)
	}
	if err == nil {
		_, err = ints(*masters)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -sqlconc, -idlemounts or -masters:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{
		n: *n, runs: *runs, redisURL: *redisURL, spawn: *spawnFlag, k: *k, concurrency: *concurrency, pool: *pool,
		pg: *pg, pgConns: *pgConns, sqlN: *sqlN, sqlRuns: *sqlRuns, sqlCap: *sqlCap, sqlConc: conc,
		only: split(*only), scenarios: split(*scens), cpuprofile: *cpuprofile, memprofile: *memprofile, timeout: *timeout, verbose: *verbose,
	}
	switch {
	case *partChildK != "":
		err = partChild(ctx, partChildFlags{kind: *partChildK, addrs: *partAddrs, key: *partKey, member: *partMember, partitions: *partitions})
	case *partitions > 0:
		ms, _ := ints(*masters)
		err = runPartitions(ctx, cfg, partConfig{partitions: *partitions, masters: ms, procs: max(*procs, 1), idle: *partIdle, pin: *pin})
	case *limitChildR != "":
		err = limitChild(ctx, *redisURL, childFlags{row: *limitChildR, key: *limitKey, end: *limitEnd})
	case *limits > 0:
		err = runLimits(ctx, cfg, *limits)
	case *moveCost > 0:
		err = runMoveCost(ctx, cfg, *moveCost)
	case *idle > 0:
		counts, _ := ints(*idleMounts)
		err = runIdle(ctx, cfg, *idle, counts)
	default:
		err = run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	n, runs, k, concurrency, pool int
	redisURL                      string
	pg                            string
	pgConns, sqlN, sqlRuns        int
	sqlCap                        time.Duration
	sqlConc                       []int
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

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range split(s) {
		var v int
		if _, err := fmt.Sscan(f, &v); err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// selected reports whether name is one of the names or patterns (none: all are).
func selected(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok || p == name {
			return true
		}
	}
	return false
}

// plan is what a run runs: the scenarios selected, each with its systems.
type plan struct {
	sc      scenario
	systems []system
}

func makePlan(cfg config) []plan {
	var out []plan
	for _, sc := range scenarios(cfg.k, cfg.sqlConc) {
		if !selected(cfg.scenarios, sc.name) {
			continue
		}
		p := plan{sc: sc}
		for _, sys := range systems(cfg) {
			if sys.sql != sc.sql || !selected(cfg.only, sys.name) || (sys.fits != nil && !sys.fits(sc)) {
				continue
			}
			p.systems = append(p.systems, sys)
		}
		if len(p.systems) > 0 {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, cfg config) error {
	plans := makePlan(cfg)
	if len(plans) == 0 {
		return errors.New("no scenario and system selected (see -only, -scenarios)")
	}
	var redisPlans, sqlPlans []plan
	for _, p := range plans {
		if p.sc.sql {
			sqlPlans = append(sqlPlans, p)
		} else {
			redisPlans = append(redisPlans, p)
		}
	}

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

	stolen0, total0 := cpuSteal()
	defer func() {
		if stolen, total := cpuSteal(); total > total0 {
			fmt.Printf("host steal during the run: %.1f%% of this machine's CPU time (a few %% is a quiet host; more, and the ratios of this run are not comparable with another's)\n",
				100*float64(stolen-stolen0)/float64(total-total0))
		}
	}()
	res := results{}
	if len(redisPlans) > 0 {
		if err := runRedis(ctx, cfg, redisPlans, &res); err != nil {
			return err
		}
	}
	if len(sqlPlans) > 0 {
		if err := runSQL(ctx, cfg, sqlPlans, &res); err != nil {
			return err
		}
	}
	res.printRatios(os.Stdout)
	return nil
}

// runRedis runs the Redis scenarios against -redis or a spawned server.
func runRedis(ctx context.Context, cfg config, plans []plan, res *results) error {
	srv, admin, done, err := redisServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()

	printHeader(ctx, cfg, srv, admin)
	for _, p := range plans {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		*res = append(*res, runRows(ctx, cfg, cfg.runs, p.systems, p.sc, func() (*runCtx, func(), error) {
			tok := token()
			rc := &runCtx{
				meter: &meter{admin: admin, serverCPU: func() (time.Duration, error) { return serverCPU(srv.pid) }},
				n:     cfg.n, pool: cfg.pool, prefix: "bench:{" + tok + "}:", srv: srv, timeout: cfg.timeout, tok: tok,
			}
			return rc, func() {
				if _, err := deleteKeys(context.WithoutCancel(ctx), admin, tok); err != nil {
					fmt.Fprintf(os.Stderr, "bench: delete keys of %s: %v\n", tok, err)
				}
			}, nil
		})...)
		res.printScenario(os.Stdout, p.sc)
	}
	return nil
}

// runRows runs each of systems on one scenario runs times, in turns (run 1 of every
// system, then run 2 of every system, ...), so that a host that slows down or speeds up
// during the scenario weighs on every row alike and the ratios between rows hold; fresh
// gives each run its context and what cleans up after it.
func runRows(ctx context.Context, cfg config, runs int, systems []system, sc scenario, fresh func() (*runCtx, func(), error)) []row {
	rows := make([]row, len(systems))
	done := make([]bool, len(systems))
	for j, sys := range systems {
		rows[j] = row{system: sys, scenario: sc}
		if sys.options != nil {
			rows[j].options = sys.options(sc)
		}
	}
	for i := range runs {
		for j := range systems {
			if done[j] {
				continue
			}
			if ctx.Err() != nil {
				rows[j].err = ctx.Err()
				done[j] = true
				continue
			}
			done[j] = runOnce(ctx, cfg, &rows[j], i, fresh)
		}
	}
	return rows
}

// settleBetweenRuns is how long a run waits, after the last one, before it starts.
const settleBetweenRuns = 200 * time.Millisecond

// runOnce runs r's system once more and adds the sample to r; it says whether r is done
// (the system does not fit, or the run failed).
func runOnce(ctx context.Context, cfg config, r *row, i int, fresh func() (*runCtx, func(), error)) bool {
	sys, sc := r.system, r.scenario
	// Each run starts from a collected heap, a moment after the last run's goroutines
	// (a peer's pollers, an App's closing writers) have wound down: whatever a row leaves
	// behind would otherwise be charged to the row after it.
	runtime.GC()
	time.Sleep(settleBetweenRuns)
	rc, cleanup, err := fresh()
	var s *sample
	if err == nil {
		s, err = sys.run(ctx, rc, sc)
		cleanup()
	}
	var na naError
	if errors.As(err, &na) {
		r.na = string(na)
		return true
	}
	if err != nil {
		r.err = err
		fmt.Fprintf(os.Stderr, "bench: %s %s run %d: %v\n", sys.name, sc.name, i+1, err)
		return true
	}
	r.samples = append(r.samples, s)
	if cfg.verbose {
		late := ""
		if len(s.late) > 0 {
			late = fmt.Sprintf(" late p50 %s p99 %s;", percentile(s.late, 0.50).Round(100*time.Microsecond), percentile(s.late, 0.99).Round(100*time.Microsecond))
		}
		if sc.sql {
			fmt.Fprintf(os.Stderr, "  %-28s %-18s run %d: %8.0f rows/s, %d rows in %s, db CPU %s\n", sys.name, sc.name, i+1,
				s.rate(), s.msgs, s.elapsed.Round(time.Millisecond), s.srvCPU)
		} else {
			fmt.Fprintf(os.Stderr, "  %-28s %-18s run %d: %8.0f msgs/s%s %6.3f cmds/msg:%s\n", sys.name, sc.name, i+1,
				s.rate(), late, s.perMsg(float64(s.totalCmds())), topCommands(s.cmds, s.msgs))
		}
	}
	return false
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
	fmt.Printf("settle bench: N=%d messages of %d bytes, median of %d runs; Redis %s (%s); %s\n",
		cfg.n, payloadSize, cfg.runs, infoField(info, "redis_version"), where, cpuNote)
	fmt.Printf("machine: %s\n", machine())
	fmt.Printf("settle rows, by options: default = 1 mount, no option but what the scenario needs (Concurrency %d, Batch %d, Block %s, settle's consumer name); "+
		"c1, c8 = 1 mount, Concurrency(1), Concurrency(8); tuned-c%d = one mount per worker, each its own consumer, Concurrency(%d) each. "+
		"c1 runs beside raw K=1 (1-worker scenarios), default and c8 beside raw K=%d; the tuned row in every scenario\n",
		settle.DefaultConcurrency, settle.DefaultBatch, settle.DefaultBlock, cfg.concurrency, cfg.concurrency, cfg.k)
	fmt.Printf("raw: K goroutines, one consumer each (retry-once: failed ids left unacked and read back from the consumer's pending entries); "+
		"asynq: one server per worker, Concurrency 50, DelayedTaskCheckInterval %s; watermill: one subscriber per worker, one group; claiming stream min-idle %s\n\n",
		asynqCheckInterval, claimMinIdle)
}

// machine describes the machine and its load.
func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(load))
	return fmt.Sprintf("%s/%s, %d CPUs (%s), %s; load average %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.Version(), strings.Join(f[:min(3, len(f))], " "))
}

// cpuSteal returns the time the host took from this (virtual) machine's CPUs and their
// time in all, in clock ticks since boot (/proc/stat); zeros where it cannot tell.
func cpuSteal() (stolen, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i < 8 { // user … steal; guest time is counted in user already
			total += n
		}
		if i == 7 {
			stolen = n
		}
	}
	return stolen, total
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
