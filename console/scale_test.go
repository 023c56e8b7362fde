package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
)

// EnvScale turns on TestEveryPageIsBoundedAtAMillionDeadLetters, which builds 1,000,000
// dead letters and a 128 MiB payload on the real Redis of SETTLE_REDIS_URL (under its
// own key prefix, deleted after): SETTLE_SCALE=1.
const EnvScale = "SETTLE_SCALE"

// The bounds of issue 23 for one page at a million dead letters.
const (
	scaleDead    = 1_000_000
	scaleBig     = 128 << 20
	pageTimeMax  = time.Second
	pageGrowthMB = 50
)

// rssKiB reads a /proc/self/status figure (VmRSS, VmHWM) in KiB.
func rssKiB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestEveryPageIsBoundedAtAMillionDeadLetters is rule 2 of issue 23, measured: with a
// dead-letter stream of 1,000,000 entries, one of them a 128 MiB payload, every page of
// the console answers within a second and grows the process's peak RSS by less than
// 50 MiB. It logs each page's time, size and growth (bench/RESULTS.md has a run).
func TestEveryPageIsBoundedAtAMillionDeadLetters(t *testing.T) {
	u := os.Getenv("SETTLE_REDIS_URL")
	if os.Getenv(EnvScale) != "1" || u == "" {
		t.Skip("set SETTLE_SCALE=1 and SETTLE_REDIS_URL to build a million dead letters on a real Redis")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := "{settle-scale-" + hex.EncodeToString(b[:]) + "}"
	in, dead := tag+":in", tag+":in.dlq"
	t.Cleanup(func() {
		for _, k := range []string{in, dead} {
			_ = rdb.Unlink(context.Background(), k).Err()
		}
		_ = rdb.Close()
	})
	start := time.Now()
	if err := rdb.XGroupCreateMkStream(ctx, in, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	const batch = 10_000
	bigID := fmt.Sprintf("1700000000000-%d", scaleDead/2)
	for n := 0; n < scaleDead; n += batch {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k := n; k < min(n+batch, scaleDead); k++ {
				if k+1 == scaleDead/2 {
					// The 128 MiB payload, in the middle: the pages that do not read it
					// must not pay for it.
					p.XAdd(ctx, &redis.XAddArgs{Stream: dead, ID: bigID, Values: []any{"payload", strings.Repeat("x", scaleBig),
						settle.HeaderDeadReason, "too large", settle.HeaderDeadSource, in}})
					continue
				}
				reason := "max attempts reached (5 of 5)"
				if k%3 == 0 {
					reason = "failed with no attempts cap declared"
				}
				p.XAdd(ctx, &redis.XAddArgs{Stream: dead, ID: fmt.Sprintf("1700000000000-%d", k+1), Values: []any{
					"payload", `{"id":` + strconv.Itoa(k) + `}`, settle.HeaderDeadReason, reason,
					settle.HeaderDeadError, "order " + strconv.Itoa(k) + " failed: unavailable", settle.HeaderDeadSource, in,
				}})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	if n, _ := rdb.XLen(ctx, dead).Result(); n != scaleDead {
		t.Fatalf("built %d dead letters, want %d", n, scaleDead)
	}
	t.Logf("built %d dead letters and a %d MiB payload in %s", scaleDead, scaleBig>>20, time.Since(start).Round(time.Millisecond))

	c, err := console.New(console.Options{Admin: admin.NewInspector(rdb), Logger: slog.New(slog.DiscardHandler),
		Mounts: []console.Mount{{Name: "scale", Kind: console.KindStream, Key: in, Group: "g", DeadLetter: dead}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	// Redis's own cost of reading the 128 MiB entry once, in a script (what a page that
	// shows it cannot go below): the time bound applies to the pages that do not read it.
	t0 := time.Now()
	if err := rdb.Eval(ctx, "return #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])", []string{dead}, bigID).Err(); err != nil {
		t.Fatal(err)
	}
	floor := time.Since(t0)
	t.Logf("Redis reads the %d MiB entry once in a script in %s", scaleBig>>20, floor.Round(time.Millisecond))
	pages := []struct {
		path     string
		readsBig bool
	}{
		{"/", false}, {"/mounts/scale", false}, {"/mounts/scale?limit=1", false}, {"/mounts/scale?limit=500", false},
		{"/mounts/scale?reason=no+attempts+cap", false}, {"/mounts/scale?error=unavailable", false},
		{"/mounts/scale?after=1700000000000-900000", false}, {"/mounts/scale/dead/1700000000000-1", false},
		{"/mounts/scale?after=1700000000000-499990", true}, {"/mounts/scale/dead/" + bigID, true},
		{"/mounts/scale?since=2023-11-14T22:13:20", false}, {"/mounts/scale?error=matches+none", false},
		{"/mounts/scale?reason=too+large", false},
		{"/find?q=1700000000000-900000", false}, {"/find?q=settle-dead-reason%3Dtoo+large&since=2023-11-14T22:13:20", false},
	}
	for _, pg := range pages {
		p := pg.path
		runtime.GC()
		debug.FreeOSMemory()
		before := rssKiB(t, "VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Logf("cannot reset the peak RSS (%v): growth is measured against the run's peak", err)
		}
		t0 := time.Now()
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		growth := (rssKiB(t, "VmHWM") - before) / 1024
		t.Logf("page %-45s %d  %8s  %9d bytes  peak RSS +%d MiB", p, resp.StatusCode, took.Round(time.Millisecond), n, growth)
		bound := pageTimeMax
		if pg.readsBig {
			bound = floor + pageTimeMax/2 // Redis's own floor, and no more than half a second of ours
		}
		if resp.StatusCode != http.StatusOK || took > bound || growth > pageGrowthMB {
			t.Errorf("page %s: %d in %s, peak RSS +%d MiB; want 200 within %s and under %d MiB", p, resp.StatusCode, took, growth, bound, pageGrowthMB)
		}
	}
}
