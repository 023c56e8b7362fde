package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cluster is a local Redis Cluster of the benchmark's own: its masters (no replicas),
// each a redis-server on a free loopback port, without persistence.
type cluster struct {
	masters []*server
	admins  []*redis.Client // one per master, for INFO and SCAN
	slots   [16384]int      // the master of each hash slot
	dir     string          // the masters' nodes.conf files
}

// spawnCluster starts a cluster of m masters. Its hash slots are arranged so that the
// j-th key of each list in spread lands on master j mod m (keys of two lists that share
// a slot: the first placement stands), every other slot in m even ranges; CLUSTER
// ADDSLOTS and MEET build it (redis-cli --cluster create refuses fewer than 3 masters).
// pin runs master i under taskset on CPU i mod the machine's CPUs.
func spawnCluster(ctx context.Context, m int, spread [][]string, pin bool) (c *cluster, err error) {
	dir, err := os.MkdirTemp("", "settle-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i := range m {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return c, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		args := []string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port), "--dir", dir,
			"--save", "", "--appendonly", "no", "--loglevel", "warning", "--logfile", fmt.Sprintf("redis-%d.log", port)}
		if pin {
			args = append([]string{"taskset", "-c", strconv.Itoa(i % runtime.NumCPU())}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // dies with the benchmark
		if err := cmd.Start(); err != nil {
			return c, fmt.Errorf("start redis-server: %w", err)
		}
		s := &server{opts: &redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)}, cmd: cmd}
		c.masters = append(c.masters, s)
		if err := s.await(ctx); err != nil {
			return c, err
		}
		s.pid = s.localPid(ctx)
		c.admins = append(c.admins, s.client(2))
	}

	fixed := map[int]int{} // slot -> master, for the keys of spread
	for _, keys := range spread {
		for j, k := range keys {
			slot, err := c.admins[0].ClusterKeySlot(ctx, k).Result()
			if err != nil {
				return c, fmt.Errorf("cluster keyslot: %w", err)
			}
			if _, ok := fixed[int(slot)]; !ok {
				fixed[int(slot)] = j % m
			}
		}
	}
	bySlot := make([][]any, m)
	for s := range len(c.slots) {
		owner, ok := fixed[s]
		if !ok {
			owner = s * m / len(c.slots)
		}
		c.slots[s] = owner
		bySlot[owner] = append(bySlot[owner], s)
	}
	for i, a := range c.admins {
		if err := a.Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			return c, fmt.Errorf("cluster set-config-epoch: %w", err)
		}
		if err := a.Do(ctx, append([]any{"cluster", "addslots"}, bySlot[i]...)...).Err(); err != nil {
			return c, fmt.Errorf("cluster addslots: %w", err)
		}
	}
	for _, s := range c.masters[1:] {
		host, port, _ := net.SplitHostPort(s.opts.Addr)
		if err := c.admins[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return c, fmt.Errorf("cluster meet: %w", err)
		}
	}
	return c, c.awaitOK(ctx, m)
}

// awaitOK waits until every master sees the cluster whole: m nodes, every slot served.
func (c *cluster) awaitOK(ctx context.Context, m int) error {
	var last string
	for range 200 {
		ok := true
		for _, a := range c.admins {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			last = info
			if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_known_nodes") != strconv.Itoa(m) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // a forming cluster: nothing to wait on but its gossip
	}
	return fmt.Errorf("cluster of %d did not form: %s", m, strings.ReplaceAll(last, "\r\n", " "))
}

// addrs are the masters' addresses.
func (c *cluster) addrs() []string {
	out := make([]string, len(c.masters))
	for i, s := range c.masters {
		out[i] = s.opts.Addr
	}
	return out
}

// client is a cluster client of the cluster.
func (c *cluster) client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs()})
}

// masterOf is the master that serves key.
func (c *cluster) masterOf(ctx context.Context, key string) (int, error) {
	slot, err := c.admins[0].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	return c.slots[slot], nil
}

// snapshot is each master's CPU and command calls at one moment.
type snapshot struct {
	cpu  []time.Duration
	cmds []map[string]int64
}

func (c *cluster) snapshot(ctx context.Context) (snapshot, error) {
	var s snapshot
	for i, m := range c.masters {
		cpu, err := serverCPU(m.pid)
		if err != nil {
			return s, err
		}
		cmds, err := commandStats(ctx, c.admins[i])
		if err != nil {
			return s, err
		}
		s.cpu, s.cmds = append(s.cpu, cpu), append(s.cmds, cmds)
	}
	return s, nil
}

// since is what each master spent from s0 to s: CPU per master, and the command calls
// summed over the masters, by command.
func (s snapshot) since(s0 snapshot) (cpu []time.Duration, cmds map[string]int64) {
	cmds = map[string]int64{}
	for i := range s.cpu {
		cpu = append(cpu, s.cpu[i]-s0.cpu[i])
		for k, v := range s.cmds[i] {
			if d := v - s0.cmds[i][k]; d > 0 {
				cmds[k] += d
			}
		}
	}
	return cpu, cmds
}

// deleteKeys deletes the keys holding tok on every master, one UNLINK per key (a
// master refuses one call of keys in several slots).
func (c *cluster) deleteKeys(ctx context.Context, tok string) error {
	for _, a := range c.admins {
		iter := a.Scan(ctx, 0, "*"+tok+"*", 1000).Iterator()
		pipe := a.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}

// stop stops every master (by its pid) and removes their files.
func (c *cluster) stop() {
	for _, a := range c.admins {
		_ = a.Close()
	}
	for _, s := range c.masters {
		s.stop()
	}
	_ = os.RemoveAll(c.dir)
}
