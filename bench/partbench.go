package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redispartition"
	"github.com/settlekit/settle/internal/script"
)

// partConfig is what -partitions runs.
type partConfig struct {
	partitions int           // of the partitioned stream
	masters    []int         // a cluster of each of these many masters, in turn
	procs      int           // consumer processes of each drain
	idle       time.Duration // the idle row's window (0: no idle row)
	pin        bool          // master i on CPU i mod the CPUs (taskset)
}

// runPartitions measures a partitioned stream against one stream (-partitions P): for
// each cluster size in -masters, a local cluster of that many masters of its own (see
// spawnCluster: the P partitions spread evenly over the masters), and on it, -runs
// times:
//
//   - stream: one settle Stream (one key: one master) drained by -procs consumer
//     processes (one App each, one mount at the default options, a handler that only
//     counts) of n already-published messages;
//   - partitioned: the same n messages, published by key (k<i>, so evenly over the
//     partitions), in a PartitionedStream with Partitions(P), drained by -procs processes,
//     each a member of the group. Their membership is announced before they start, so
//     each takes its own partitions at its first step and none moves during the drain.
//
// Each row prints msgs/s (first handler call to last, over the processes), each
// master's CPU per 1,000 messages, Redis commands per message (INFO commandstats summed
// over the masters), the processes' CPU per 1,000 messages, and the ownership's
// commands per message (lease calls, heartbeats and fences, counted by a hook on the
// processes' clients). Then, with -partidle, one idle partitioned mount (one process,
// holding every partition) is watched for that long: commands per second over the
// masters, lease calls and heartbeats per second.
func runPartitions(ctx context.Context, cfg config, pc partConfig) error {
	fmt.Printf("partitioned streams: N=%d messages of %d bytes, %d consumer processes (one App, one mount at the default options each), Partitions(%d), masters %v, %d runs, pinned masters: %v\n",
		cfg.n, payloadSize, pc.procs, pc.partitions, pc.masters, cfg.runs, pc.pin)
	fmt.Printf("machine: %s\n\n", machine())
	for _, m := range pc.masters {
		if err := partCluster(ctx, cfg, pc, m); err != nil {
			return fmt.Errorf("%d masters: %w", m, err)
		}
	}
	return nil
}

// partCluster runs the rows of one cluster size.
func partCluster(ctx context.Context, cfg config, pc partConfig, m int) error {
	tok := token()
	name := func(row string) string { return "bench-" + tok + "-" + row }
	var spread [][]string
	for _, row := range append([]string{"idle"}, runNames(cfg.runs)...) {
		var ks []string
		for i := range pc.partitions {
			ks = append(ks, keys.Partition(name(row), i))
		}
		spread = append(spread, ks)
	}
	c, err := spawnCluster(ctx, m, spread, pc.pin)
	if err != nil {
		return err
	}
	defer c.stop()
	cc := c.client()
	defer cc.Close()

	per := make([]int, m)
	for _, k := range spread[1] {
		i, err := c.masterOf(ctx, k)
		if err != nil {
			return err
		}
		per[i]++
	}
	var desc []string
	for i, s := range c.masters {
		desc = append(desc, fmt.Sprintf("master %d %s pid %d: %d partitions", i, s.opts.Addr, s.pid, per[i]))
	}
	fmt.Printf("== %d master(s): %s\n", m, strings.Join(desc, "; "))
	fmt.Printf("| row | run | msgs/s | each master's CPU ms/1k msgs | Redis cmds/msg | consumers' CPU ms/1k msgs | ownership cmds/msg (lease, beat, fence) | handled per process (partitions held) | top commands/msg | load |\n")
	fmt.Printf("| --- | --- | ---: | --- | ---: | ---: | --- | --- | --- | --- |\n")
	for r, row := range runNames(cfg.runs) {
		for _, kind := range []string{"stream", "partitioned"} {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			key := name(row)
			if kind == "stream" {
				key = "{" + name(row) + "}:plain"
			}
			out, err := partDrain(ctx, cfg, pc, c, cc, kind, key)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", kind, r+1, err)
			}
			fmt.Printf("| %s | %d | %s | %s |\n", kind, r+1, out, loadAvg())
		}
		if err := c.deleteKeys(context.WithoutCancel(ctx), name(row)); err != nil {
			return err
		}
	}
	if pc.idle > 0 {
		out, err := partIdle(ctx, pc, c, cc, name("idle"))
		if err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		fmt.Printf("idle: %s; load %s\n", out, loadAvg())
	}
	fmt.Println()
	return nil
}

func runNames(runs int) []string {
	out := make([]string, runs)
	for i := range out {
		out[i] = "r" + strconv.Itoa(i+1)
	}
	return out
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// partDrain fills key (a stream, or a partitioned stream's name) with n messages and
// measures their drain by -procs processes.
func partDrain(ctx context.Context, cfg config, pc partConfig, c *cluster, cc *redis.ClusterClient, kind, key string) (string, error) {
	n := cfg.n
	route := func(int) string { return key }
	if kind == "partitioned" {
		if err := settle.PartitionedStream(cc, key, "g", settle.Partitions(pc.partitions)).Declare(ctx); err != nil {
			return "", err
		}
		route = func(i int) string {
			return keys.Partition(key, settle.PartitionFor("k"+strconv.Itoa(i), pc.partitions))
		}
	}
	for lo := 0; lo < n; lo += 1000 {
		_, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+1000, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: route(i), Values: []any{"payload", payload(i), settle.HeaderKey, "k" + strconv.Itoa(i)}})
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("fill: %w", err)
		}
	}
	members := make([]string, pc.procs)
	for i := range members {
		members[i] = fmt.Sprintf("%s-m%d", key, i)
	}
	if kind == "partitioned" {
		// Every member announced before any starts: each takes only its own partitions.
		for _, mem := range members {
			if _, err := script.MemberBeat(ctx, cc, keys.PartitionMembers(key, "g"), mem, redispartition.DefaultLeaseTTL, -1, false); err != nil {
				return "", err
			}
		}
	}

	s0, err := c.snapshot(ctx)
	if err != nil {
		return "", err
	}
	procs := make([]*partProc, 0, pc.procs)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	for _, mem := range members {
		p, err := startPartProc(c, kind, key, mem, pc.partitions)
		if err != nil {
			return "", err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.ready(); err != nil {
			return "", err
		}
	}
	deadline := time.Now().Add(cfg.timeout)
	var stats []childStat
	for {
		stats = stats[:0]
		var sum int64
		for _, p := range procs {
			st, err := p.stat()
			if err != nil {
				return "", err
			}
			stats = append(stats, st)
			sum += st.handled
		}
		if sum >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%d of %d handled after %s", sum, n, cfg.timeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling the children's counts
		}
	}
	s1, err := c.snapshot(ctx)
	if err != nil {
		return "", err
	}
	cpu, cmds := s1.since(s0)
	held := map[string]int{} // partitions held per member at the end
	if kind == "partitioned" {
		for i := range pc.partitions {
			owner, err := cc.HGet(ctx, keys.PartitionLease(key, i, "g"), "owner").Result()
			if err != nil && err != redis.Nil {
				return "", err
			}
			held[owner]++
		}
	}

	var first, last int64
	var cliCPU time.Duration
	var lease, beat, fence int64
	var handled []string
	for i, st := range stats {
		if first == 0 || st.first < first {
			first = st.first
		}
		last = max(last, st.last)
		cliCPU += st.cpu - st.cpuFirst
		lease, beat, fence = lease+st.lease, beat+st.beat, fence+st.fence
		h := strconv.FormatInt(st.handled, 10)
		if kind == "partitioned" {
			h += fmt.Sprintf(" (%d partitions)", held[members[i]])
		}
		handled = append(handled, h)
	}
	per1k := func(d time.Duration) string {
		return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000/float64(n)*1000)
	}
	var cpus []string
	for _, d := range cpu {
		cpus = append(cpus, per1k(d))
	}
	var total int64
	for _, v := range cmds {
		total += v
	}
	rate := float64(n) / time.Duration(last-first).Seconds()
	fn := float64(n)
	return fmt.Sprintf("%.0f | %s | %.4f | %s | %.4f (%.4f, %.4f, %.4f) | %s |%s",
		rate, strings.Join(cpus, " / "), float64(total)/fn, per1k(cliCPU),
		float64(lease+beat+fence)/fn, float64(lease)/fn, float64(beat)/fn, float64(fence)/fn,
		strings.Join(handled, " / "), topN(cmds, n, 6)), nil
}

// partIdle watches one idle partitioned mount holding every partition.
func partIdle(ctx context.Context, pc partConfig, c *cluster, cc *redis.ClusterClient, name string) (string, error) {
	p, err := startPartProc(c, "partitioned", name, name+"-m0", pc.partitions)
	if err != nil {
		return "", err
	}
	defer func() { _ = p.stop() }()
	if err := p.ready(); err != nil {
		return "", err
	}
	// Warm up: every lease held, the mount at its first waits.
	for i := range pc.partitions {
		for {
			owner, err := cc.HGet(ctx, keys.PartitionLease(name, i, "g"), "owner").Result()
			if err == nil && owner == name+"-m0" {
				break
			}
			if err != nil && err != redis.Nil {
				return "", err
			}
			time.Sleep(50 * time.Millisecond) // a starting mount: nothing to wait on
		}
	}
	time.Sleep(3 * time.Second)
	s0, err := c.snapshot(ctx)
	if err != nil {
		return "", err
	}
	st0, err := p.stat()
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	select {
	case <-time.After(pc.idle):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	st1, err := p.stat()
	if err != nil {
		return "", err
	}
	s1, err := c.snapshot(ctx)
	if err != nil {
		return "", err
	}
	secs := time.Since(t0).Seconds()
	cpu, cmds := s1.since(s0)
	var total int64
	for _, v := range cmds {
		total += v
	}
	var cpus []string
	for _, d := range cpu {
		cpus = append(cpus, fmt.Sprintf("%.2f%%", 100*d.Seconds()/secs))
	}
	return fmt.Sprintf("1 mount holding all %d partitions, watched %.1f s: %.1f Redis cmds/s (%s); lease calls %.2f/s, heartbeats %.2f/s, fences %.2f/s; consumer CPU %.2f%%, each master's CPU %s",
		pc.partitions, secs, float64(total)/secs, topN(cmds, int(secs), 8), float64(st1.lease-st0.lease)/secs, float64(st1.beat-st0.beat)/secs,
		float64(st1.fence-st0.fence)/secs, 100*(st1.cpu-st0.cpu).Seconds()/secs, strings.Join(cpus, " / ")), nil
}

// topN formats the k most called commands per unit (message or second).
func topN(cmds map[string]int64, per int, k int) string {
	var names []string
	for name := range cmds {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return int(cmds[b] - cmds[a]) })
	var out []string
	for _, name := range names[:min(k, len(names))] {
		out = append(out, fmt.Sprintf(" %s %.4f", name, float64(cmds[name])/float64(per)))
	}
	return strings.Join(out, ",")
}
