package console_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/source"
)

// limitedMount makes the refunds stream's group, takes its flow limits' state as the
// engine's gate takes it (one slot of ConcurrencyBy for each of acct-1 and acct-2, two
// of GlobalConcurrency(5), two starts of RateLimit(50, 1s)), and returns the mount with
// those limits declared.
func (w *world) limitedMount(t *testing.T) console.Mount {
	t.Helper()
	if err := w.rdb.XGroupCreateMkStream(w.ctx, w.in, w.group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	store := redisbase.Limits{Client: w.rdb, Group: w.group, Key: w.in}
	for _, acct := range []string{"acct-1", "acct-2"} {
		gates := []source.Gate{
			{Name: "rate", Interval: 20 * time.Millisecond, Burst: 1},
			{Name: "slots", Slots: 1, Lease: time.Minute, Value: acct},
			{Name: "slots2", Slots: 5, Lease: time.Minute},
		}
		if _, err := store.LimitTake(w.ctx, gates, "token-"+acct, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	m := w.mount()
	m.Limits = []admin.FlowLimit{
		{Kind: admin.LimitRate, N: 50, Per: time.Second},
		{Kind: admin.LimitConcurrencyBy, N: 1},
		{Kind: admin.LimitGlobalConcurrency, N: 5},
	}
	return m
}

// A mount's page shows each of its flow limits: the rate, what is in use, and the key
// values at their limit.
func TestMountPageShowsEachFlowLimitItsUseAndTheKeysAtTheirLimit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv, cl := w.serve(t, console.Options{Prefix: "/settle", Mounts: []console.Mount{w.limitedMount(t)}})
	code, body := get(t, cl, srv.URL+"/settle/mounts/refunds")
	if code != http.StatusOK {
		t.Fatalf("the mount page: %d\n%s", code, body)
	}
	for _, want := range []string{`id="limits"`, "RateLimit(50, 1s)", "50/s", "ConcurrencyBy(key, 1)", "<code>acct-1</code> (1), <code>acct-2</code> (1)", "GlobalConcurrency(5)", "2 of 5"} {
		if !strings.Contains(body, want) {
			t.Errorf("the mount page does not show %q", want)
		}
	}
	// A mount without limits has no such section.
	srv2, cl2 := w.serve(t, console.Options{Prefix: "/settle"})
	if _, body := get(t, cl2, srv2.URL+"/settle/mounts/refunds"); strings.Contains(body, `id="limits"`) {
		t.Error("a mount without flow limits shows a flow limits section")
	}
}

// TestBrowserShowsAMountsFlowLimits: chromium renders the flow limits table of a mount,
// the keys at their limit in their row.
func TestBrowserShowsAMountsFlowLimits(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("the browser test needs " + chromium + " (apt-get install -y chromium)")
	}
	w := newWorld(t)
	srv, _ := w.serve(t, console.Options{Prefix: "/settle", Mounts: []console.Mount{w.limitedMount(t)}})
	b := newBrowser(t)
	b.do("open the mount", chromedp.Navigate(srv.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#limits")))
	if got := b.text(`tr[data-limit="slots"] td[data-keys]`); got != "2 of 2" {
		t.Fatalf("ConcurrencyBy's keys read %q, want 2 of 2 at their limit", got)
	}
	if got := b.text(`tr[data-limit="slots"] td[data-values]`); got != "acct-1 (1), acct-2 (1)" {
		t.Fatalf("ConcurrencyBy's values at their limit read %q", got)
	}
	if got := b.text(`tr[data-limit="slots2"] td[data-in-use]`); got != "2 of 5" {
		t.Fatalf("GlobalConcurrency's in use reads %q, want 2 of 5", got)
	}
	if got := b.text(`tr[data-limit="slots2"] td[data-at-limit]`); got != "room" {
		t.Fatalf("GlobalConcurrency's state reads %q, want room", got)
	}
	b.shot("console-limits")
}
