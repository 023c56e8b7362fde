package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/settlekit/settle/settletest"
)

// lastLineRE is the run's last line.
var lastLineRE = regexp.MustCompile(`^charged ([0-9]+) of ([0-9]+): by consumer ([0-9]+)/([0-9]+)/([0-9]+), ([0-9.]+)/s on average \(limit 50\), at most [0-9]+ in any second, at most ([0-9]+) of an account at once \(limit 1\), waited ([0-9]+) \(rate ([0-9]+), concurrency ([0-9]+)\)$`)

// redisURL is the URL of r's server.
func redisURL(r *settletest.Server) string {
	if u := os.Getenv(settletest.EnvRedisURL); u != "" {
		return u
	}
	return "redis://" + r.Mini.Addr()
}

// Three consumers sharing RateLimit(50, 1s) and ConcurrencyBy(account, 1) take every
// charge once between them; the provider never sees two charges of one account at
// once, nor more than 50 a second from the first start to the last (within 5%: each
// start is timed when its handler begins, a little after the start the limit gave it,
// and the first's delay shortens the span); charges waited for both limits (published
// at twice the rate, a hot account every third); half way, settle/admin reads both
// limits in use.
func TestThreeConsumersShareTheProvidersLimits(t *testing.T) {
	t.Parallel()
	r := settletest.Redis(t)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-redis", redisURL(r), "-prefix", r.Prefix, "-n", "100"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	m := lastLineRE.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("the last line %q does not match %s", lines[len(lines)-1], lastLineRE)
	}
	v := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		v[i], _ = strconv.Atoi(m[i])
	}
	average, _ := strconv.ParseFloat(m[6], 64)
	charged, n, a, b, c, perAccount, waited, rate, conc := v[1], v[2], v[3], v[4], v[5], v[7], v[8], v[9], v[10]
	if charged != 100 || n != 100 || a+b+c != 100 {
		t.Errorf("charged %d of %d, by consumer %d+%d+%d: want 100 of 100, each once", charged, n, a, b, c)
	}
	if perAccount != 1 {
		t.Errorf("the provider saw %d charges of one account at once, want 1", perAccount)
	}
	if average > 50*1.05 {
		t.Errorf("the provider saw %.1f charges a second on average, want at most 50 (within 5%%)", average)
	}
	if rate == 0 || conc == 0 || waited < rate+conc {
		t.Errorf("waited %d (rate %d, concurrency %d): want waits for both limits", waited, rate, conc)
	}
	for _, want := range []string{"half way, RateLimit(50, 1s): 50/s", "half way, ConcurrencyBy(key, 1): "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the output does not say %q:\n%s", want, stdout.String())
		}
	}
}
