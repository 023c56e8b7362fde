package console_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/inbox"
)

// chromium is the browser the browser test drives (Debian's package).
const chromium = "/usr/bin/chromium"

// EnvScreenshots names the directory the browser test also writes the README's
// screenshots to (console-overview.png, console-deadletter.png and the others).
const EnvScreenshots = "SETTLE_CONSOLE_SCREENSHOTS"

// browser is one test's headless chromium (a fresh profile, no network but the
// console's) and where its screenshots go.
type browser struct {
	ctx  context.Context
	dirs []string
	t    *testing.T
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx, t: t, dirs: []string{t.TempDir()}}
	if d := os.Getenv(EnvScreenshots); d != "" {
		b.dirs = append(b.dirs, d)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return b
}

// do runs the steps, each wait bounded by waitBound.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitBound)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		b.t.Fatalf("%s (at %s): %v\n%s", what, loc, err, html)
	}
}

// text returns the text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitBound)
	defer cancel()
	for {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil {
			return strings.TrimSpace(s)
		}
		// The node found was replaced before its text was read (the document changed
		// under the query: a reload, a late navigation): look for it again.
		if !strings.Contains(err.Error(), "No node with given id") || ctx.Err() != nil {
			b.t.Fatalf("text of %s: %v", sel, err)
		}
	}
}

// eval evaluates the JavaScript expression js.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// readmeShots are the screenshots the README shows (docs/NAME.png).
var readmeShots = map[string]bool{"console-overview": true, "console-deadletter": true, "console-charts": true, "console-charts-narrow": true, "console-find": true, "console-find-narrow": true, "console-mount": true, "console-mount-narrow": true}

// shot writes a full-page PNG of what the browser shows as name.png in the test's temp
// dir (and, for the README's, in $SETTLE_CONSOLE_SCREENSHOTS), and logs its paths.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := b.dirs[:1]
	if readmeShots[name] {
		dirs = b.dirs
	}
	for _, d := range dirs {
		p := filepath.Join(d, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot %s", p)
	}
}

// rowIDs are the ids of the dead-letter rows the page shows.
func (b *browser) rowIDs() []string {
	return eval[[]string](b, `Array.from(document.querySelectorAll("#dead-letters tbody tr[data-id]")).map(r => r.dataset.id)`)
}

// TestBrowserReplaysSelectedDeadLettersUntilSettledPausesAndRefusesInReadOnly drives
// the console in chromium against a real Redis holding the refunds and an inbox on
// PostgreSQL, as an operator would.
func TestBrowserReplaysSelectedDeadLettersUntilSettledPausesAndRefusesInReadOnly(t *testing.T) {
	pgURL := os.Getenv("SETTLE_POSTGRES_URL")
	switch {
	case os.Getenv("SETTLE_REDIS_URL") == "" || pgURL == "":
		t.Skip("the browser test needs the real servers: set SETTLE_REDIS_URL and SETTLE_POSTGRES_URL")
	case func() bool { _, err := os.Stat(chromium); return err != nil }():
		t.Skip("the browser test needs " + chromium + " (apt-get install -y chromium)")
	}
	w := newWorld(t)
	w.seed(t)
	ib := mailInbox(t, inbox.Postgres, pgURL)
	inboxes := []console.Inbox{{Name: "mailer", Inbox: ib, Groups: []string{"emails"}, Dead: []string{"emails.dead"}}}
	srv, _ := w.serve(t, console.Options{Prefix: "/settle", Inboxes: inboxes})
	ro, _ := w.serve(t, console.Options{Prefix: "/settle", Inboxes: inboxes, ReadOnly: true})
	b := newBrowser(t)
	base := srv.URL + "/settle/"

	// The overview: the dead-letter count of the refunds mount.
	b.do("open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#overview")))
	if got := b.text(`tr[data-mount="refunds"] td[data-dead]`); got != strconv.Itoa(deadTotal) {
		t.Fatalf("the overview shows %q dead letters, want %d", got, deadTotal)
	}
	if got := b.text(`tr[data-mount="mailer"] td[data-dead]`); got != "2" {
		t.Fatalf("the overview shows %q dead rows for the inbox, want 2", got)
	}
	b.shot("console-overview")
	b.do("narrow screen", chromedp.EmulateViewport(390, 844))
	b.shot("console-overview-narrow")
	b.do("wide screen", chromedp.EmulateViewport(1280, 900))

	// The mount's page: filter by a reason, select two, replay them at a rate.
	b.do("open the mount", chromedp.Click(chromedp.CSS(`tr[data-mount="refunds"] a`)), chromedp.WaitVisible(chromedp.CSS("#dead-letters")))
	if got := len(b.rowIDs()); got != deadTotal {
		t.Fatalf("the mount page lists %d dead letters, want %d", got, deadTotal)
	}
	b.do("filter by reason",
		chromedp.SendKeys(chromedp.CSS("#f-reason"), "no attempts cap"), chromedp.Click(chromedp.CSS("#f-apply")),
		chromedp.WaitVisible(chromedp.CSS(`#f-reason[value="no attempts cap"]`)))
	picked := b.rowIDs()
	want := w.deadIDs(t, "no attempts cap")
	if strings.Join(picked, " ") != strings.Join(want, " ") || len(picked) != deadNoCap {
		t.Fatalf("filtered by reason the page lists %v, want %v", picked, want)
	}
	b.shot("console-mount")
	b.do("select two and replay",
		chromedp.Click(chromedp.CSS(`#dead-letters tbody tr[data-id="`+picked[0]+`"] input`)),
		chromedp.Click(chromedp.CSS(`#dead-letters tbody tr[data-id="`+picked[1]+`"] input`)),
		chromedp.SendKeys(chromedp.CSS("#rate"), "50"),
		chromedp.Click(chromedp.CSS("#replay-selected")), chromedp.WaitVisible(chromedp.CSS("#confirm-count")))
	if got := b.text("#confirm-count"); got != "2" {
		t.Fatalf("the confirmation says %s will move, want 2", got)
	}
	if n := w.xlen(t, w.dead); n != deadTotal {
		t.Fatalf("the confirmation moved dead letters: %d left, want %d", n, deadTotal)
	}
	b.shot("console-confirm")
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
	if got := b.text("#result"); !strings.Contains(got, "Replayed 2 dead letters") {
		t.Fatalf("the result says %q", got)
	}
	b.shot("console-result")

	// They leave the list, and the stream's group settles them.
	b.do("back to the mount", chromedp.Navigate(srv.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#dead-letters")))
	left := b.rowIDs()
	if len(left) != deadTotal-2 || strings.Contains(strings.Join(left, " "), picked[0]) || strings.Contains(strings.Join(left, " "), picked[1]) {
		t.Fatalf("after the replay the page lists %v, want the %d others", left, deadTotal-2)
	}
	insp := admin.NewInspector(w.rdb)
	if s, err := insp.Stream(w.ctx, w.in, w.group); err != nil || s.Lag != 2 {
		t.Fatalf("the group's lag after the replay: %+v, %v; want the 2 replayed", s, err)
	}
	healed := func(context.Context, *settle.Message, Refund) error { return nil }
	w.runWith(t, settle.Typed(healed), 2)
	if s, err := insp.Stream(w.ctx, w.in, w.group); err != nil || s.Lag != 0 || s.Pending != 0 {
		t.Fatalf("after a consumer ran: %+v, %v; want lag 0 and nothing pending (both acked)", s, err)
	}
	b.do("reload the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#overview")))
	if got := b.text(`tr[data-mount="refunds"] td[data-dead]`); got != strconv.Itoa(deadTotal-2) {
		t.Fatalf("the overview shows %q dead letters after the replay, want %d", got, deadTotal-2)
	}

	// A dead letter's page.
	b.do("open a dead letter", chromedp.Navigate(srv.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#dead-letters")),
		chromedp.Click(chromedp.CSS(`#dead-letters tbody tr[data-id="`+left[0]+`"] a`)), chromedp.WaitVisible(chromedp.CSS("#payload")))
	if got := b.text("#payload"); !strings.Contains(got, "unavail") {
		t.Fatalf("the payload shown is %q, want the refund decoded", got)
	}
	b.shot("console-deadletter")

	// Pause and resume the mount.
	b.do("pause", chromedp.Navigate(srv.URL+"/settle/mounts/refunds"), chromedp.Click(chromedp.CSS("#pause-toggle")), chromedp.WaitVisible(chromedp.CSS("#result")))
	if paused, err := insp.Paused(w.ctx, w.in, w.group); err != nil || !paused {
		t.Fatalf("after Pause the mount is not paused: %v, %v", paused, err)
	}
	b.do("see it paused", chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#state")))
	if got := b.text("#state"); got != "paused" {
		t.Fatalf("the mount's state reads %q, want paused", got)
	}
	b.do("resume", chromedp.Click(chromedp.CSS("#pause-toggle")), chromedp.WaitVisible(chromedp.CSS("#result")),
		chromedp.Click(chromedp.CSS("#back")), chromedp.WaitVisible(chromedp.CSS("#state")))
	if paused, err := insp.Paused(w.ctx, w.in, w.group); err != nil || paused || b.text("#state") != "running" {
		t.Fatalf("after Resume: paused %v, %v, state %q; want running", paused, err, b.text("#state"))
	}

	// The inbox's page.
	b.do("open the inbox", chromedp.Navigate(base), chromedp.Click(chromedp.CSS(`tr[data-mount="mailer"] a`)), chromedp.WaitVisible(chromedp.CSS("#dead-rows")))
	if n := eval[int](b, `document.querySelectorAll("#dead-rows tbody tr[data-id]").length`); n != 2 {
		t.Fatalf("the inbox page lists %d dead rows, want 2", n)
	}
	b.shot("console-inbox")

	// Read-only: no action is offered, and a replay posted anyway is refused.
	b.do("open the read-only console", chromedp.Navigate(ro.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#dead-letters")))
	if n := eval[int](b, `document.querySelectorAll("form[method=post], #replay-selected").length`); n != 0 {
		t.Fatalf("the read-only console renders %d action forms", n)
	}
	b.do("post a replay anyway", chromedp.Evaluate[chromedp.Void](`(() => {
		const f = document.createElement("form"); f.method = "post"; f.action = "/settle/mounts/refunds/replay";
		for (const [k, v] of [["scope", "matching"], ["confirm", "yes"]]) { const i = document.createElement("input"); i.name = k; i.value = v; f.appendChild(i); }
		document.body.appendChild(f); f.submit(); })()`), chromedp.WaitVisible(chromedp.CSS("#error")))
	if got := b.text("#error"); !strings.Contains(got, "read-only") {
		t.Fatalf("the read-only console answered a replay with %q", got)
	}
	if n := w.xlen(t, w.dead); n != deadTotal-2 {
		t.Fatalf("the read-only console moved dead letters: %d left, want %d", n, deadTotal-2)
	}
}

// TestBrowserSignsInWithTheTokenThenActs: a token console shows chromium its login
// page, refuses a wrong token, and after the right one serves the pages and their
// actions (the session cookie set by the login).
func TestBrowserSignsInWithTheTokenThenActs(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("the browser test needs " + chromium + " (apt-get install -y chromium)")
	}
	w := newWorld(t)
	w.seed(t)
	srv, _ := w.serve(t, console.Options{Prefix: "/settle", Auth: console.Auth{Token: "correct horse"}})
	b := newBrowser(t)
	b.do("open the console", chromedp.Navigate(srv.URL+"/settle/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if n := eval[int](b, `document.querySelectorAll("#overview").length`); n != 0 {
		t.Fatal("the overview shows before signing in")
	}
	b.do("a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "battery staple"), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	b.shot("console-login-refused")
	b.do("the token", chromedp.SendKeys(chromedp.CSS("#token"), "correct horse"), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("#overview")))
	if got := b.text(`tr[data-mount="refunds"] td[data-dead]`); got != strconv.Itoa(deadTotal) {
		t.Fatalf("the overview shows %q dead letters, want %d", got, deadTotal)
	}
	b.do("pause the mount", chromedp.Navigate(srv.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#dead-letters")),
		chromedp.Click(chromedp.CSS(`form[action$="/pause"] button`)), chromedp.WaitVisible(chromedp.CSS("#result")))
	if !w.paused(t) {
		t.Fatal("signed in, the pause button paused nothing")
	}
}

// TestBrowserDrawsTheLastHourFindsAMessageEverywhereReleasesAndPromotesAll drives the
// charts, the search and the actions where an operator looks, at 1280 and 390 px.
func TestBrowserDrawsTheLastHourFindsAMessageEverywhereReleasesAndPromotesAll(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("the browser test needs " + chromium + " (apt-get install -y chromium)")
	}
	w := newWorld(t)
	w.seed(t)
	origin, deadLetter := w.wander(t)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	c, srv, _ := w.serveConsole(t, console.Options{Prefix: "/settle", Clock: clock.Now})
	base := srv.URL + "/settle/"
	// The refunds ran; now a consumer reads 3 more in each of three 5 s samples and
	// crashes holding them.
	pub := settle.NewPublisher(w.rdb)
	for k := range 3 {
		c.Sample(w.ctx)
		clock.Advance(5 * time.Second)
		for n := range 3 {
			if _, err := pub.Publish(w.ctx, w.in, Refund{AmountCents: 100, Card: "4999-held", ID: uint64(900 + 3*k + n)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.rdb.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: w.group, Consumer: "crashed", Streams: []string{w.in, ">"}, Count: 3, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.Sample(w.ctx)
	b := newBrowser(t)

	// The charts, drawn with data, on the overview and the mount's page.
	b.do("open the overview", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#overview-charts")))
	if n := eval[int](b, `document.querySelectorAll("#overview-charts svg.spark path.line").length`); n < 4 {
		t.Fatalf("the overview draws %d sparklines, want the mount's charts", n)
	}
	if got := b.text("#m0-pending .last"); got != "9" {
		t.Fatalf("the overview's pending chart ends at %q, want 9", got)
	}
	b.shot("console-charts")
	b.do("narrow", chromedp.EmulateViewport(390, 844))
	b.shot("console-charts-narrow")
	b.do("wide", chromedp.EmulateViewport(1280, 900))

	// Find the message retried twice and parked: its first delivery, two retry copies,
	// the parked copy; then, dead-lettered, the dead letter too.
	b.do("search by origin id", chromedp.SendKeys(chromedp.CSS("#top-q"), origin+"\r"), chromedp.WaitVisible(chromedp.CSS("#find-places")))
	kinds := func() string {
		return strings.Join(eval[[]string](b, `Array.from(document.querySelectorAll("#find-places tbody tr[data-kind]")).map(r => r.dataset.kind)`), " ")
	}
	if got := kinds(); got != "settled settled settled delayed" {
		t.Fatalf("the search while parked shows %q", got)
	}
	deadLetter()
	b.do("search again", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#find-places")))
	if got := kinds(); got != "settled settled settled settled dead-letter" {
		t.Fatalf("the search after the dead letter shows %q", got)
	}
	b.shot("console-find")
	b.do("narrow find", chromedp.EmulateViewport(390, 844))
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth`); over {
		t.Fatalf("at 390 px the search's answer scrolls sideways (%d px wide)", eval[int](b, `document.documentElement.scrollWidth`))
	}
	b.shot("console-find-narrow")
	b.do("wide find", chromedp.EmulateViewport(1280, 900))
	b.do("open the dead letter from the search", chromedp.Click(chromedp.CSS(`#find-places tr[data-kind="dead-letter"] a`)), chromedp.WaitVisible(chromedp.CSS("#payload")))
	if got := b.text("#dl-reason"); !strings.Contains(got, "4 of 4") {
		t.Fatalf("the dead letter found says %q", got)
	}

	// Release the crashed consumer's entries, ticked, from the mount's page.
	b.do("open the mount", chromedp.Navigate(base+"mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#pending-entries")))
	if got := b.text("#pending-shown"); got != "9 of 9" {
		t.Fatalf("the pending entries say %q, want 9 of 9", got)
	}
	b.do("tick all and release",
		chromedp.Click(chromedp.CSS(`#pending-entries thead .select-all`)),
		chromedp.Click(chromedp.CSS("#release-selected")), chromedp.WaitVisible(chromedp.CSS("#confirm-count")))
	if got := b.text("#confirm-count"); got != "9" {
		t.Fatalf("the release confirms %s, want 9", got)
	}
	b.do("confirm the release", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
	if got := b.text("#result"); !strings.Contains(got, "Released 9 pending entries of the 9 confirmed") {
		t.Fatalf("the release says %q", got)
	}

	// Promote every parked member from the page.
	b.do("back to the mount", chromedp.Navigate(base+"mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#delay-members")))
	b.do("narrow mount", chromedp.EmulateViewport(390, 844))
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth`); over {
		t.Fatalf("at 390 px the mount's page scrolls sideways (%d px wide)", eval[int](b, `document.documentElement.scrollWidth`))
	}
	b.shot("console-mount-narrow")
	b.do("wide mount", chromedp.EmulateViewport(1280, 900))
	b.shot("console-mount")
	b.do("promote all", chromedp.Click(chromedp.CSS("#promote-all")), chromedp.WaitVisible(chromedp.CSS("#confirm-count")))
	if got := b.text("#confirm-count"); got != strconv.Itoa(len(busyCards)) {
		t.Fatalf("promote all confirms %s, want the %d parked", got, len(busyCards))
	}
	b.do("confirm the promotion", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result")))
	info, err := admin.NewInspector(w.rdb).DelaySet(w.ctx, w.delayed)
	if err != nil || info.Overdue != int64(len(busyCards)) {
		t.Fatalf("after promote all: %+v, %v; want every member due", info, err)
	}

	// Given a Prometheus (a fake of its HTTP API), the charts come from its scrape of
	// settleotel's metrics, over the range picked.
	ps := httptest.NewServer(&fakeProm{})
	t.Cleanup(ps.Close)
	_, promSrv, _ := w.serveConsole(t, console.Options{Prefix: "/settle", Clock: clock.Now, Prometheus: ps.URL})
	b.do("open the mount with Prometheus", chromedp.Navigate(promSrv.URL+"/settle/mounts/refunds"), chromedp.WaitVisible(chromedp.CSS("#chart-ranges")),
		chromedp.Click(chromedp.CSS(`#chart-ranges a[href$="range=6h"]`)), chromedp.WaitVisible(chromedp.CSS(`#chart-ranges a[aria-current][href$="range=6h"]`)))
	if got := b.text("#charts-h"); got != "The last 6h" {
		t.Fatalf("the charts' heading says %q, want The last 6h", got)
	}
	if got := b.text("#m-lag .last"); got != "–" || eval[int](b, `document.querySelectorAll("#m-settled-ack path.line, #m-settled-dead_letter path.line").length`) != 2 {
		t.Fatalf("the charts from Prometheus: backlog ends at %q; want the settlements by action drawn", got)
	}
	b.shot("console-prometheus")
}
