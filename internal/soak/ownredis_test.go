package soak

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redistest"
)

// redisReady is the line redis-server logs once it has loaded its data and accepts
// connections.
const redisReady = "Ready to accept connections"

// ownRedis is a redis-server of the test's own on a free loopback port, persisting to
// an append-only file in a directory of the test's (appendfsync always, no RDB
// snapshots), which the test kills with SIGKILL and restarts on the same port and
// directory. Only this process is ever signalled, by its pid; the shared server of
// SETTLE_REDIS_URL is never touched.
type ownRedis struct {
	t    *testing.T
	bin  string
	dir  string
	log  string // the server's output, every run appended
	port int
	args []string // more arguments for redis-server (see startOwnRedisWith)

	cmd      *exec.Cmd
	done     chan struct{} // closed once the current process was reaped
	restarts int
}

// startOwnRedis starts a redis-server of the test's own. It needs SETTLE_REDIS_URL set
// (the sign that the machine runs real servers; skipping otherwise) and a redis-server
// on the PATH. The server is killed when the test ends.
func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	return startOwnRedisWith(t)
}

// startOwnRedisWith starts a redis-server of the test's own as startOwnRedis does, with
// args added to its command line (a later argument overrides an earlier one: "--appendonly
// no", "--replicaof 127.0.0.1 6380").
func startOwnRedisWith(t *testing.T, args ...string) *ownRedis {
	t.Helper()
	redistest.RealOnly(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("%s is set but there is no redis-server to start: %v", redistest.EnvURL, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	s := &ownRedis{t: t, bin: bin, dir: dir, log: filepath.Join(dir, "redis.log"), port: port, args: args}
	t.Cleanup(func() {
		if s.running() {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	s.start()
	return s
}

// addr is the server's address.
func (s *ownRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// url is the server's address as a SETTLE_REDIS_URL-style URL.
func (s *ownRedis) url() string { return "redis://" + s.addr() + "/0" }

func (s *ownRedis) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// start starts the server and returns once it has loaded its append-only file and
// accepts connections (it says so on its output).
func (s *ownRedis) start() {
	s.t.Helper()
	out, err := os.OpenFile(s.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", ""}, s.args...)...)
	// The server dies with the test process, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		s.t.Fatalf("start redis-server: %v", err)
	}
	ready := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pipe)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
			if !signalled && strings.Contains(sc.Text(), redisReady) {
				close(ready)
				signalled = true
			}
		}
		_, _ = io.Copy(out, pipe)
	}()
	done := make(chan struct{})
	go func() {
		<-scanned // Wait closes the pipe: read it to its end first
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	select {
	case <-ready:
	case <-done:
		s.t.Fatalf("redis-server exited before accepting connections:\n%s", s.tail())
	case <-time.After(30 * time.Second):
		s.t.Fatalf("redis-server did not accept connections within 30s:\n%s", s.tail())
	}
}

// kill kills the server with SIGKILL and reaps it.
func (s *ownRedis) kill() {
	s.t.Helper()
	if !s.running() {
		s.t.Fatalf("redis-server (pid %d) is not running:\n%s", s.cmd.Process.Pid, s.tail())
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// restart starts the server again on the same port and directory.
func (s *ownRedis) restart() {
	s.t.Helper()
	s.restarts++
	s.start()
}

// tail returns the end of the server's output.
func (s *ownRedis) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
