package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the Redis the benchmark runs against: its address, and, when it runs on
// this machine, its pid (for its CPU time).
type server struct {
	opts *redis.Options
	pid  int // 0: not local (no server CPU figures)
	cmd  *exec.Cmd
}

// connect parses url and finds the server's pid when it is local.
func connect(ctx context.Context, rawURL string) (*server, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", rawURL, err)
	}
	s := &server{opts: opts}
	if err := s.await(ctx); err != nil {
		return nil, err
	}
	s.pid = s.localPid(ctx)
	return s, nil
}

// spawn starts a redis-server of its own on a free loopback port, without persistence.
func spawn(ctx context.Context) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// The server dies with the benchmark, however the benchmark ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &server{opts: &redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)}, cmd: cmd}
	if err := s.await(ctx); err != nil {
		s.stop()
		return nil, err
	}
	s.pid = s.localPid(ctx)
	return s, nil
}

// stop stops a spawned server (by its pid) and waits for it.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func (s *server) await(ctx context.Context) error {
	rdb := s.client(4)
	defer rdb.Close()
	var err error
	for range 100 {
		if err = rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // polling a server that is starting: nothing to wait on
	}
	return fmt.Errorf("redis at %s: %w", s.opts.Addr, err)
}

// client returns a new client of the server with a pool of the given size (0: the
// go-redis default).
func (s *server) client(pool int) *redis.Client {
	o := *s.opts
	if pool > 0 {
		o.PoolSize = pool
	}
	return redis.NewClient(&o)
}

// localPid is the server's pid when the server runs on this machine (a loopback address
// and a /proc entry that is a redis-server), else 0.
func (s *server) localPid(ctx context.Context) int {
	host, _, err := net.SplitHostPort(s.opts.Addr)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	rdb := s.client(1)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(infoField(info, "process_id"))
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if pid == 0 || err != nil || !strings.Contains(string(comm), "redis") {
		return 0
	}
	return pid
}

func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commandStats returns the calls of every command (INFO commandstats), INFO itself left
// out.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	return commandStat(ctx, rdb, "calls")
}

// commandStat returns one field of every command's INFO commandstats line ("calls",
// "usec"), INFO itself left out.
func commandStat(ctx context.Context, rdb *redis.Client, field string) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "cmdstat_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(line, ":")
		if name == "info" {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out, sc.Err()
}

// serverCPU is the server's user + system CPU time so far, from /proc/<pid>/stat.
func serverCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, errors.New("server not local")
	}
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return st.utime + st.stime, nil
}

// token returns a fresh random token naming one run's keys.
func token() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sbrun" + hex.EncodeToString(b[:])
}

// deleteKeys deletes every key whose name holds tok (SCAN MATCH, then UNLINK): the keys
// of one run, whatever prefix a library put before them. It never flushes.
func deleteKeys(ctx context.Context, rdb *redis.Client, tok string) (int, error) {
	var n int
	iter := rdb.Scan(ctx, 0, "*"+tok+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return n, err
			}
			n += len(batch)
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}

// redactURL hides a password in a Redis URL for printing.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}
