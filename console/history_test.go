package console_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/console"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// chartOf returns the figure id of a page: its points and the last value shown.
func chartOf(t *testing.T, body, id string) (points, last string) {
	t.Helper()
	m := regexp.MustCompile(`<figure class="chart" id="` + id + `" data-points="(\d+)"><figcaption><span class="label">[^<]+</span> <strong class="last">([^<]+)</strong>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no chart %s on the page:\n%s", id, body)
	}
	return m[1], m[2]
}

func TestTheChartsDrawTheSamplesOfTheLastWindowAndNoMore(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c, srv, cl := w.serveConsole(t, console.Options{Clock: clock.Now, SampleEvery: 5 * time.Second, SampleWindow: 20 * time.Second})
	ctx := context.Background()

	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	if !strings.Contains(body, `class="note no-charts"`) {
		t.Fatalf("before any sample the page draws charts:\n%s", body)
	}
	c.Sample(ctx)
	// Five seconds later the group has read 10 more entries and 2 more dead letters came.
	clock.Advance(5 * time.Second)
	for range 10 {
		w.rdb.XAdd(ctx, &redis.XAddArgs{Stream: w.in, Values: []any{"payload", "x"}})
	}
	if err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: w.group, Consumer: "reader", Streams: []string{w.in, ">"}, Count: 10, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	w.addDead(t, 2)
	c.Sample(ctx)

	_, body = get(t, cl, srv.URL+"/mounts/refunds")
	wantRate := "2" // 10 entries in 5 s
	if os.Getenv("SETTLE_REDIS_URL") == "" {
		wantRate = "0" // miniredis tells no entries-read nor entries-added (XINFO)
	}
	if points, last := chartOf(t, body, "m-rate"); points != "2" || last != wantRate {
		t.Fatalf("the read rate chart: %s points, last %s; want 2 points, %s a second", points, last, wantRate)
	}
	if _, last := chartOf(t, body, "m-added"); last != wantRate {
		t.Fatalf("the write rate chart ends at %s, want %s a second", last, wantRate)
	}
	if _, last := chartOf(t, body, "m-deadrate"); last != "0.4" {
		t.Fatalf("the dead-lettered rate chart ends at %s, want 2 in 5 s = 0.4 a second", last)
	}
	if points, last := chartOf(t, body, "m-pending"); points != "2" || last != "10" {
		t.Fatalf("the pending chart: %s points, last %s; want 2, 10", points, last)
	}
	if _, last := chartOf(t, body, "m-dead"); last != "7" {
		t.Fatalf("the dead-letter chart ends at %s, want 7", last)
	}
	if !strings.Contains(body, "the dead letter grew by 2 in the last 5s") || strings.Index(body, `id="problems"`) > strings.Index(body, `id="dead-h"`) {
		t.Fatalf("the growing dead letter is not a problem shown first:\n%s", body)
	}
	if !strings.Contains(body, `<path class="line" d="M`) {
		t.Fatalf("no sparkline is drawn:\n%s", body)
	}
	_, body = get(t, cl, srv.URL+"/")
	if points, _ := chartOf(t, body, "m0-lag"); points != "2" {
		t.Fatalf("the overview's backlog chart holds %s points, want 2", points)
	}

	// The window holds 20 s / 5 s = 4 samples: older ones are dropped.
	for range 6 {
		clock.Advance(5 * time.Second)
		c.Sample(ctx)
	}
	_, body = get(t, cl, srv.URL+"/mounts/refunds")
	if points, last := chartOf(t, body, "m-rate"); points != "4" || last != "0" {
		t.Fatalf("after 8 samples the rate chart holds %s points (last %s), want the window's 4 (nothing read since: 0)", points, last)
	}
	if strings.Contains(body, "the dead letter grew") {
		t.Fatal("the dead letter still grows after the window passed its growth")
	}
}

func TestRunSamplesAtOnceThenReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t)
	c, srv, cl := w.serveConsole(t, console.Options{SampleEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run takes its first sample, then sees the end
	if err := c.Run(ctx); err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if status, body := get(t, cl, srv.URL+"/mounts/refunds"); status != 200 || strings.Contains(body, "no-charts") || !strings.Contains(body, `id="m-lag" data-points="1"`) {
		t.Fatalf("Run took no sample: %d", status)
	}
	off, _, _ := w.serveConsole(t, console.Options{SampleEvery: -1})
	if err := off.Run(context.Background()); err != nil {
		t.Fatalf("Run with sampling off = %v, want nil at once", err)
	}
}
