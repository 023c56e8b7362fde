package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startWeb starts settle web with args on a free port and returns the console's URL;
// the process is stopped (SIGINT, as an operator would) when the test ends.
func startWeb(t *testing.T, b *testBundle, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--redis", b.url, "web", "--addr", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
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
		return m[1]
	case <-time.After(waitBound):
		t.Fatalf("settle web printed no address within %s; stderr:\n%s", waitBound, stderr.String())
	}
	return ""
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
