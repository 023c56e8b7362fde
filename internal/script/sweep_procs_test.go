package script_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// Sweepers in several processes on one delay set (issue 7 item 7): the parent test parks
// members through the real park scripts while two child processes (this test binary
// re-executed as TestSweepHelperProcess) sweep with 4 goroutines each, then judges what
// reached the stream and the list. The "never early" judgement needs no client clock:
// a member's due time is the park script's TIME + delay, and its copy's stream id
// carries the server's clock at the sweep's XADD.

// envSweeper carries a sweeper process's configuration (JSON); TestSweepHelperProcess
// does nothing without it.
const envSweeper = "SETTLE_SWEEP_HELPER"

const (
	sweepProcs      = 2
	sweepGoroutines = 4
	membersMini     = 2000                    // per delay set, on miniredis (slower: a Lua state per call)
	membersReal     = 5000                    // per delay set, on a real server or cluster
	sweepWindow     = 2000 * time.Millisecond // delays are spread over [0, window)
	retryHeader     = "settle-retry-count"
)

// sweepLimits are the batch sizes the goroutines of a process use in turn: the
// transport's own, and small ones for more interleaving.
var sweepLimits = []int{script.SweepBatch, 7, script.SweepBatch, 1}

// sweeperConfig is one sweeper process's configuration.
type sweeperConfig struct {
	Proc       int
	URL        string   // a single server
	Cluster    []string // or a cluster's masters
	Set        string   // the stream's delay set
	Stream     string
	ListSet    string // the list's delay set
	List       string
	Ready      string // INCRed once the goroutines sweep
	Report     string // hash: moves and calls per process, written at exit
	Goroutines int
	Lifetime   time.Duration // an orphaned sweeper gives up after it
}

func (c sweeperConfig) client() redis.UniversalClient {
	if len(c.Cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Cluster, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		panic(err)
	}
	// A reply lost to a timeout would leave a move uncounted: wait long for it.
	opt.ReadTimeout, opt.WriteTimeout = 30*time.Second, 30*time.Second
	return redis.NewClient(opt)
}

// TestSweepHelperProcess is a sweeper process of TestSweepersInTwoProcessesMoveEachMemberOnce:
// its goroutines sweep both delay sets until SIGTERM, then it reports its moves. It does
// nothing unless started by that test.
func TestSweepHelperProcess(t *testing.T) {
	raw := os.Getenv(envSweeper)
	if raw == "" {
		t.Skip("helper process: runs only when started by TestSweepersInTwoProcessesMoveEachMemberOnce")
	}
	stopped, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var cfg sweeperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(stopped, cfg.Lifetime)
	defer cancel()
	rdb := cfg.client()
	defer rdb.Close()

	var movedStream, movedList, calls atomic.Int64
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		limit := sweepLimits[g%len(sweepLimits)]
		wg.Go(func() {
			if err := sweepLoop(ctx, rdb, cfg, limit, &movedStream, &movedList, &calls); err != nil {
				t.Errorf("sweeper %d/%d: %v", cfg.Proc, g, err)
				cancel()
			}
		})
	}
	bg, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	if err := rdb.Incr(bg, cfg.Ready).Err(); err != nil {
		t.Errorf("ready: %v", err)
		cancel()
	}
	wg.Wait()
	if stopped.Err() == nil {
		t.Errorf("sweeper %d: not stopped within its lifetime %s", cfg.Proc, cfg.Lifetime)
	}
	// The report gets 30 s of its own: bg's may have passed while the sweepers ran (on a
	// loaded machine they run longer than that before the test stops them).
	bg, done = context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	p := strconv.Itoa(cfg.Proc)
	if err := rdb.HIncrBy(bg, cfg.Report, p+":stream", movedStream.Load()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HIncrBy(bg, cfg.Report, p+":list", movedList.Load()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HIncrBy(bg, cfg.Report, p+":calls", calls.Load()).Err(); err != nil {
		t.Fatal(err)
	}
}

// sweepLoop sweeps both delay sets until ctx ends: at once again after a full batch,
// else after a short wait bounded by the earliest due time the sweeps reported. Each
// call runs on a context of its own, so that a stop never abandons a call whose moves
// went uncounted.
func sweepLoop(ctx context.Context, rdb redis.UniversalClient, cfg sweeperConfig, limit int, movedStream, movedList, calls *atomic.Int64) error {
	const idle = 20 * time.Millisecond
	for ctx.Err() == nil {
		wait := idle
		note := func(res script.SweepResult) {
			switch {
			case res.Moved == limit:
				wait = 0
			case res.Next >= 0:
				wait = min(wait, max(time.Duration(res.Next-res.Now)*time.Millisecond, time.Millisecond))
			}
		}
		call, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := script.Sweep(call, rdb, cfg.Set, cfg.Stream, -1, limit, wire.FieldPayload)
		if err != nil {
			cancel()
			return err
		}
		movedStream.Add(int64(res.Moved))
		note(res)
		res, err = script.SweepList(call, rdb, cfg.ListSet, cfg.List, -1, limit)
		cancel()
		if err != nil {
			return err
		}
		movedList.Add(int64(res.Moved))
		calls.Add(2)
		note(res)
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	return nil
}

func TestSweepersInTwoProcessesMoveEachMemberOnce(t *testing.T) {
	t.Parallel()

	t.Run("OneServer", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		url := os.Getenv(redistest.EnvURL)
		if r.Mini != nil {
			// miniredis answers TIME and stamps stream ids from the same clock (the wall
			// clock: the test never sets its time), so the judgement holds there too.
			url = "redis://" + r.Mini.Addr()
		}
		runSweepers(t, r.Client, r.Key, sweeperConfig{URL: url}, r.Mini != nil)
	})

	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		r := redistest.Cluster(t)
		runSweepers(t, r.Client, r.Key, sweeperConfig{Cluster: strings.Split(os.Getenv(redistest.EnvCluster), ",")}, false)
	})
}

// runSweepers starts the sweeper processes, parks the members in each delay set
// while they sweep, waits until both sets are empty, stops them and judges the stream
// and the list.
func runSweepers(t *testing.T, rdb redis.UniversalClient, key func(string) string, base sweeperConfig, mini bool) {
	ctx := context.Background()
	cfg := base
	cfg.Set, cfg.Stream, cfg.ListSet, cfg.List = key("delayed"), key("in"), key("ldelayed"), key("list")
	cfg.Ready, cfg.Report = key("ready"), key("report")
	cfg.Goroutines, cfg.Lifetime = sweepGoroutines, 4*time.Minute
	slack := idClockSlack(t, rdb, mini)
	sweepMembers := membersReal
	if mini {
		sweepMembers = membersMini
	}

	// The originals the park script acknowledges: N entries pending to consumer "parker".
	if err := rdb.XGroupCreateMkStream(ctx, cfg.Stream, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range sweepMembers {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: cfg.Stream, Values: []any{wire.FieldPayload, fmt.Sprintf("s%d", i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var originals []string
	for len(originals) < sweepMembers {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "parker", Streams: []string{cfg.Stream, ">"}, Count: int64(sweepMembers), Block: -1}).Result()
		if err != nil {
			t.Fatalf("xreadgroup after %d of %d: %v", len(originals), sweepMembers, err)
		}
		for _, m := range res[0].Messages {
			originals = append(originals, m.ID)
		}
	}

	procs := startSweepers(t, cfg)
	waitFor(t, procs, "both sweeper processes sweep", 2*time.Minute, func() (bool, error) {
		n, err := rdb.Get(ctx, cfg.Ready).Int()
		if err == redis.Nil {
			return false, nil
		}
		return n == sweepProcs, err
	})

	// Park every member through the real scripts, due over the next sweepWindow on the
	// server's clock (now -1: the scripts read TIME), while the sweepers run.
	start := time.Now()
	dues := make([]int64, sweepMembers)
	var wg sync.WaitGroup
	const parkers = 4
	for p := range parkers {
		wg.Go(func() {
			for i := p; i < sweepMembers; i += parkers {
				delay := time.Duration(i*7919%int(sweepWindow.Milliseconds())) * time.Millisecond
				member := wire.DelayMember(originals[i], []byte(fmt.Sprintf("s%d", i)), map[string]string{retryHeader: "1"})
				due, err := script.Park(ctx, rdb, cfg.Set, cfg.Stream, "g", "parker", originals[i], member, delay, 0, -1)
				if err != nil {
					t.Errorf("park s%d: %v", i, err)
					return
				}
				dues[i] = due
				if _, parked, err := script.ParkValue(ctx, rdb, cfg.ListSet, "", "", wire.ValueDelayMember(strconv.Itoa(i), []byte(fmt.Sprintf("l%d", i))), delay, 0, -1); err != nil || !parked {
					t.Errorf("park l%d: parked %v, %v", i, parked, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	parked := time.Since(start)
	waitFor(t, procs, "both delay sets empty", 3*time.Minute, func() (bool, error) {
		a, err := rdb.ZCard(ctx, cfg.Set).Result()
		if err != nil {
			return false, err
		}
		b, err := rdb.ZCard(ctx, cfg.ListSet).Result()
		return a == 0 && b == 0, err
	})
	drained := time.Since(start)
	stopSweepers(t, procs)

	report, err := rdb.HGetAll(ctx, cfg.Report).Result()
	if err != nil {
		t.Fatal(err)
	}
	reported := func(kind string) (total int, per []int) {
		for p := range sweepProcs {
			n, _ := strconv.Atoi(report[fmt.Sprintf("%d:%s", p, kind)])
			total += n
			per = append(per, n)
		}
		return total, per
	}
	streamMoves, streamPer := reported("stream")
	listMoves, listPer := reported("list")
	_, callsPer := reported("calls")

	t.Run("StreamGetsEachMemberOnceNeverEarly", func(t *testing.T) {
		msgs, err := rdb.XRange(ctx, cfg.Stream, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		var early, dups int
		var lateness []int64
		for _, m := range msgs {
			payload, _, headers := wire.FromStream(m.Values)
			if _, copied := headers[retryHeader]; !copied {
				continue // an original
			}
			p := string(payload)
			seen[p]++
			if seen[p] > 1 {
				dups++
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(p, "s"))
			if err != nil || i < 0 || i >= sweepMembers {
				t.Fatalf("copy %s carries payload %q, not one the test parked", m.ID, p)
			}
			ms, err := strconv.ParseInt(m.ID[:strings.IndexByte(m.ID, '-')], 10, 64)
			if err != nil {
				t.Fatalf("stream id %q: %v", m.ID, err)
			}
			if ms+slack < dues[i] {
				early++
				if early <= 5 {
					t.Errorf("%s moved early: stream id %s (ms %d), due %d", p, m.ID, ms, dues[i])
				}
			}
			lateness = append(lateness, ms-dues[i])
		}
		missing := 0
		for i := range sweepMembers {
			if seen[fmt.Sprintf("s%d", i)] == 0 {
				missing++
			}
		}
		slices.Sort(lateness)
		t.Logf("stream: %d members, %d copies, %d distinct, %d duplicates, %d missing, %d early (slack %d ms); moves by process %v; copy stamped after due by median %d ms, max %d ms",
			sweepMembers, len(msgs)-sweepMembers, len(seen), dups, missing, early, slack, streamPer, at(lateness, 50), at(lateness, 100))
		if dups != 0 || missing != 0 || early != 0 || len(seen) != sweepMembers || len(msgs) != 2*sweepMembers {
			t.Fatalf("stream holds %d entries (%d originals + copies), %d distinct copies, %d duplicates, %d missing, %d early; want %d copies, each once, none early",
				len(msgs), sweepMembers, len(seen), dups, missing, early, sweepMembers)
		}
		if streamMoves != sweepMembers {
			t.Fatalf("the sweep scripts reported %d moves (by process %v), want %d", streamMoves, streamPer, sweepMembers)
		}
		if p, err := rdb.XPending(ctx, cfg.Stream, "g").Result(); err != nil || p.Count != 0 {
			t.Fatalf("pending = %+v, %v; want every original acknowledged by its park", p, err)
		}
	})

	t.Run("ListGetsEachMemberOnce", func(t *testing.T) {
		// A list item carries no server timestamp: "never early" is judged on the stream.
		items, err := rdb.LRange(ctx, cfg.List, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, v := range items {
			seen[v]++
		}
		missing := 0
		for i := range sweepMembers {
			if seen[fmt.Sprintf("l%d", i)] != 1 {
				missing++
			}
		}
		t.Logf("list: %d members, %d items, %d distinct; moves by process %v", sweepMembers, len(items), len(seen), listPer)
		if len(items) != sweepMembers || len(seen) != sweepMembers || missing != 0 {
			t.Fatalf("list holds %d items, %d distinct, %d members not there exactly once; want %d, each once", len(items), len(seen), missing, sweepMembers)
		}
		if listMoves != sweepMembers {
			t.Fatalf("the sweep scripts reported %d moves (by process %v), want %d", listMoves, listPer, sweepMembers)
		}
	})

	t.Run("BothProcessesMoved", func(t *testing.T) {
		t.Logf("parked %d+%d members in %s, both sets empty after %s; sweep calls by process %v", sweepMembers, sweepMembers, parked.Round(time.Millisecond), drained.Round(time.Millisecond), callsPer)
		for p := range sweepProcs {
			if streamPer[p]+listPer[p] == 0 {
				t.Fatalf("process %d moved nothing (stream %v, list %v): the run did not sweep from two processes", p, streamPer, listPer)
			}
		}
	})
}

// at returns the pct-th percentile of sorted xs (0 when empty).
func at(xs []int64, pct int) int64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[(len(xs)-1)*pct/100]
}

// idClockSlack is how far (ms) a copy's stream id may lie before the sweep's TIME.
// Redis up to 7.0 and miniredis stamp an id inside a script from the live clock, read
// after the script's TIME: 0. Redis 7.2 and later (and Valkey) stamp it with the time
// the script started, a little before its TIME: a few ms are allowed there.
func idClockSlack(t *testing.T, rdb redis.UniversalClient, mini bool) int64 {
	t.Helper()
	if mini {
		return 0
	}
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(info, "server_name:valkey") {
		return 5
	}
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		major, _ := strconv.Atoi(parts[0])
		minor := 0
		if len(parts) > 1 {
			minor, _ = strconv.Atoi(parts[1])
		}
		if major > 7 || major == 7 && minor >= 2 {
			return 5
		}
		return 0
	}
	t.Fatalf("INFO server names no redis_version:\n%s", info)
	return 0
}

// sweeperProc is one sweeper process.
type sweeperProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped
	err  error         // cmd.Wait's result, set before done closes
	log  string
}

func (p *sweeperProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *sweeperProc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// startSweepers starts the sweeper processes; any still running when the test ends is
// killed by pid.
func startSweepers(t *testing.T, base sweeperConfig) []*sweeperProc {
	t.Helper()
	dir := t.TempDir()
	var procs []*sweeperProc
	t.Cleanup(func() {
		for _, p := range procs {
			if !p.exited() {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	})
	for i := range sweepProcs {
		cfg := base
		cfg.Proc = i
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := &sweeperProc{done: make(chan struct{}), log: filepath.Join(dir, fmt.Sprintf("sweeper-%d.log", i))}
		out, err := os.Create(p.log)
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(os.Args[0], "-test.run=^TestSweepHelperProcess$", "-test.count=1", "-test.v", "-test.timeout=5m")
		p.cmd.Env = append(os.Environ(), envSweeper+"="+string(raw))
		p.cmd.Stdout, p.cmd.Stderr = out, out
		if err := p.cmd.Start(); err != nil {
			_ = out.Close()
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			_ = out.Close()
			close(p.done)
		}()
		procs = append(procs, p)
	}
	return procs
}

// stopSweepers stops every sweeper with SIGTERM and demands a clean exit.
func stopSweepers(t *testing.T, procs []*sweeperProc) {
	t.Helper()
	for _, p := range procs {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for i, p := range procs {
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("sweeper %d (pid %d) did not exit within 2m of SIGTERM; log:\n%s", i, p.cmd.Process.Pid, p.tail())
		}
		if p.err != nil {
			t.Fatalf("sweeper %d (pid %d) exited: %v; log:\n%s", i, p.cmd.Process.Pid, p.err, p.tail())
		}
		if !strings.Contains(p.tail(), "--- PASS: TestSweepHelperProcess") {
			t.Fatalf("sweeper %d (pid %d) did not run TestSweepHelperProcess; log:\n%s", i, p.cmd.Process.Pid, p.tail())
		}
	}
}

// waitFor polls cond until it holds, failing at the deadline or as soon as a sweeper
// process exits.
func waitFor(t *testing.T, procs []*sweeperProc, what string, deadline time.Duration, cond func() (bool, error)) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		for i, p := range procs {
			if p.exited() {
				t.Fatalf("waiting for %s: sweeper %d (pid %d) exited: %v; log:\n%s", what, i, p.cmd.Process.Pid, p.err, p.tail())
			}
		}
		if time.Now().After(end) {
			t.Fatalf("%s not reached within %s", what, deadline)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
