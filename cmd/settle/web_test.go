package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startWeb starts settle web with args on a free port and returns the console's URL;
// the process is stopped (SIGINT, as an operator would) when the test ends.
func startWeb(t *testing.T, b *testBundle, args ...string) string {
	t.Helper()
	u, _ := startWebWith(t, nil, b, args...)
	return u
}

// lockedBuffer is a buffer a process writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWebWith is startWeb with the environment variables env added, returning also
// what the process writes to stderr.
func startWebWith(t *testing.T, env []string, b *testBundle, args ...string) (string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--redis", b.url, "web", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("settle web did not stop cleanly on SIGINT: %v; stderr:\n%s", err, stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case s := <-line:
		m := regexp.MustCompile(`^settle console on (http://\S+)\n$`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("settle web printed %q, want its address; stderr:\n%s", s, stderr.String())
		}
		return m[1], stderr
	case <-time.After(waitBound):
		t.Fatalf("settle web printed no address within %s; stderr:\n%s", waitBound, stderr.String())
	}
	return "", stderr
}

func TestWebServesAnOverviewWhoseDeadLetterCountIsTheStatsCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, _ := b.twoMounts(t)
	stats := lines[mountOut](t, b.ok(t, nil, "stats", "--config", path, "--json").stdout)
	want := -1
	for _, m := range stats {
		if m.Mount == "payments" && m.DeadLetters != nil {
			want = m.DeadLetters.Count
		}
	}
	if want != deadTotal {
		t.Fatalf("stats says %d dead letters, want %d", want, deadTotal)
	}
	u := startWeb(t, b, "--config", path, "--prefix", "/settle", "--read-only")
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(u, "/settle/") {
		t.Fatalf("GET %s = %d:\n%s", u, resp.StatusCode, body)
	}
	if !strings.Contains(string(body), `data-dead="`+strconv.Itoa(want)+`"`) {
		t.Fatalf("the overview does not show the %d dead letters stats counts:\n%s", want, body)
	}
	resp, err = http.Post(u+"mounts/payments/purge", "application/x-www-form-urlencoded", strings.NewReader("scope=matching&confirm=yes"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || b.xlen(t, b.dlq) != deadTotal {
		t.Fatalf("--read-only: a purge answered %d and left %d dead letters, want 403 and all %d", resp.StatusCode, b.xlen(t, b.dlq), deadTotal)
	}
}

func TestWebNeedsAConfigFile(t *testing.T) {
	t.Parallel()
	r := runSettle(t, nil, nil, "web")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--config") {
		t.Fatalf("settle web without --config: exit %d, stderr %q; want %d naming --config", r.code, r.stderr, exitUsage)
	}
}

// TestWebRefusesAReadWriteConsoleWithoutCredentialsOnANonLoopbackAddress: exit 1
// naming what to do, nothing served.
func TestWebRefusesAReadWriteConsoleWithoutCredentialsOnANonLoopbackAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, _ := b.twoMounts(t)
	r := runSettle(t, []string{EnvWebAuth + "="}, nil, "--redis", b.url, "--config", path, "web", "--addr", "0.0.0.0:0")
	if r.code != 1 || !strings.Contains(r.stderr, "refusing to serve a read-write console without authentication") {
		t.Fatalf("settle web --addr 0.0.0.0:0 = exit %d, want 1 refusing:\n%s", r.code, r.stderr)
	}
}

// TestWebReadOnlyWithoutCredentialsOnANonLoopbackAddressServesWithAWarning.
func TestWebReadOnlyWithoutCredentialsOnANonLoopbackAddressServesWithAWarning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, _ := b.twoMounts(t)
	_, stderr := startWebWith(t, []string{EnvWebAuth + "="}, b, "--config", path, "--addr", "0.0.0.0:0", "--read-only")
	if !strings.Contains(stderr.String(), "warning: serving a read-only console without authentication") {
		t.Fatalf("no warning on stderr:\n%s", stderr.String())
	}
}

// TestWebTakesItsTokenFromAFileOrTheEnvironmentNeverAFlag: with a token from
// --auth-file (or $SETTLE_WEB_AUTH) a page asks for it and a bearer header passes; on a
// non-loopback address it serves; a --token flag does not exist.
func TestWebTakesItsTokenFromAFileOrTheEnvironmentNeverAFlag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, _ := b.twoMounts(t)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("0123456789abcdef-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func() string{
		"file": func() string {
			u, _ := startWebWith(t, nil, b, "--config", path, "--auth-file", file, "--addr", "0.0.0.0:0")
			return u
		},
		"env": func() string {
			u, _ := startWebWith(t, []string{EnvWebAuth + "=0123456789abcdef-token"}, b, "--config", path)
			return u
		},
	} {
		u := strings.Replace(strings.Replace(run(), "[::]", "127.0.0.1", 1), "0.0.0.0", "127.0.0.1", 1)
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: a page without the token = %d, want 401 (the login page)", name, resp.StatusCode)
		}
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer 0123456789abcdef-token")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: a page with the token = %d, want 200", name, resp.StatusCode)
		}
	}
	if r := runSettle(t, nil, nil, "--redis", b.url, "web", "--token", "x"); r.code != 2 {
		t.Fatalf("settle web --token = exit %d, want 2 (no such flag)", r.code)
	}
}
