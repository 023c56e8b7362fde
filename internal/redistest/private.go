package redistest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvServer names the environment variable that picks the server binary Private starts
// (redis-server, or valkey-server when there is none).
const EnvServer = "SETTLE_REDIS_SERVER"

// Private starts a server of the test's own on a free loopback port, without
// persistence, for what a test must not do to the shared one (ACL users, faults), and
// returns a client of its default user. It runs where tests run on real servers
// (SETTLE_REDIS_URL set; skipped otherwise), from $SETTLE_REDIS_SERVER, redis-server or
// valkey-server. The server is killed, by its pid, when the test ends, and dies with
// the test process.
func Private(t testing.TB) *Redis {
	t.Helper()
	RealOnly(t)
	bin := os.Getenv(EnvServer)
	if bin == "" {
		bin = "redis-server"
		if _, err := exec.LookPath(bin); err != nil {
			bin = "valkey-server"
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	r := &Redis{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port}), Prefix: "{p}:"}
	t.Cleanup(func() { _ = r.Client.Close() })
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); r.Client.Ping(ctx).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("%s on port %s did not answer PING", bin, port)
		}
		time.Sleep(20 * time.Millisecond) // a process starting up: nothing to wait on but its port
	}
	return r
}

// User creates the ACL user name on the private server r with the given rules (after
// "on", a password and "~*": every key) and returns a client logged in as that user,
// closed when the test ends.
func (r *Redis) User(t testing.TB, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw", "~*", "&*"}
	for _, rule := range rules {
		args = append(args, rule)
	}
	if err := r.Client.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("acl setuser %s: %v", name, err)
	}
	o := r.Client.Options()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: name, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
