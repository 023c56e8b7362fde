package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/settlekit/settle/console"
)

var deadCountRe = regexp.MustCompile(`data-dead="(-?\d+)"`)

func TestOverviewShowsEachMountsDeadLetterCountAndDelayedRetries(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{Prefix: "/settle"})
	status, body := get(t, cl, srv.URL+"/settle/")
	if status != http.StatusOK {
		t.Fatalf("GET /settle/ = %d:\n%s", status, body)
	}
	m := deadCountRe.FindStringSubmatch(body)
	if m == nil || m[1] != strconv.Itoa(deadTotal) {
		t.Fatalf("overview dead-letter count %v, want %d:\n%s", m, deadTotal, body)
	}
	if !strings.Contains(body, `http-equiv="refresh"`) || !strings.Contains(body, `href="/settle/mounts/refunds"`) {
		t.Fatalf("the overview neither refreshes itself nor links the mount's page:\n%s", body)
	}
	if status, _ := get(t, cl, srv.URL+"/settle/static/console.css"); status != http.StatusOK {
		t.Fatalf("GET the embedded style sheet = %d", status)
	}
}

func TestMountPageFiltersDeadLettersByReasonAndCountsThemByReason(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds?reason="+url.QueryEscape("no attempts cap"))
	if got := strings.Count(body, `<tr data-id="`); got != deadNoCap {
		t.Fatalf("filtered by reason: %d rows, want %d:\n%s", got, deadNoCap, body)
	}
	if !strings.Contains(body, `<strong id="dead-count">`+strconv.Itoa(deadNoCap)+`</strong>`) {
		t.Fatalf("the summary does not count the %d matching:\n%s", deadNoCap, body)
	}
	_, body = get(t, cl, srv.URL+"/mounts/refunds")
	if !strings.Contains(body, "max attempts reached (3 of 3)</td><td class=\"n\">"+strconv.Itoa(deadCapped)) {
		t.Fatalf("the by-reason counts do not show %d capped:\n%s", deadCapped, body)
	}
	if !strings.Contains(body, `<span class="badge ok">alive</span>`) && !strings.Contains(body, "worker-1") {
		t.Fatalf("the consumers are not shown:\n%s", body)
	}
	if strings.Count(body, "<tr data-member=") != len(busyCards) || !strings.Contains(body, `id="promote-all"`) {
		t.Fatalf("the delay set's %d members are not listed with their promote buttons:\n%s", len(busyCards), body)
	}
	if status, body := get(t, cl, srv.URL+"/mounts/refunds?since=yesterday"); status != http.StatusBadRequest || !strings.Contains(body, `since &#34;yesterday&#34; is not a time`) {
		t.Fatalf("a since that does not parse: %d, want 400 naming it:\n%s", status, body)
	}
}

func TestDeadLettersShowABoundedPageAndPageByID(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{PageSize: 2})
	all := w.deadIDs(t, "")
	var seen []string
	next := srv.URL + "/mounts/refunds"
	for range deadTotal {
		_, body := get(t, cl, next)
		for _, m := range regexp.MustCompile(`<tr data-id="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		if n := strings.Count(body, `<tr data-id="`); n > 2 {
			t.Fatalf("a page of %d rows, want at most the page size 2", n)
		}
		m := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(body)
		if m == nil {
			break
		}
		next = srv.URL + strings.ReplaceAll(m[1], "&amp;", "&")
	}
	if strings.Join(seen, " ") != strings.Join(all, " ") {
		t.Fatalf("pages showed %v, want each dead letter once in order %v", seen, all)
	}
	_, body := get(t, cl, srv.URL+"/mounts/refunds?limit=100000")
	if n := strings.Count(body, `<tr data-id="`); n != deadTotal {
		t.Fatalf("limit=100000: %d rows, want all %d (the bound is %d)", n, deadTotal, console.MaxPageSize)
	}
}

func TestReplayConfirmsHowManyThenMovesExactlyTheSelected(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	ids := w.deadIDs(t, "")
	form := url.Values{"csrf": {token(t, body)}, "scope": {"selected"}, "id": ids[1:3], "rate": {"100"}}
	status, body := post(t, cl, srv.URL+"/mounts/refunds/replay", form)
	if status != http.StatusOK || !strings.Contains(body, `<strong id="confirm-count">2</strong>`) {
		t.Fatalf("replay without confirm = %d, want a confirmation saying 2 will move:\n%s", status, body)
	}
	if n := w.xlen(t, w.dead); n != deadTotal {
		t.Fatalf("the confirmation moved dead letters: %d left, want %d", n, deadTotal)
	}
	before := w.xlen(t, w.in)
	form.Set("confirm", "yes")
	status, body = post(t, cl, srv.URL+"/mounts/refunds/replay", form)
	if status != http.StatusOK || !strings.Contains(body, "Replayed 2 dead letters") {
		t.Fatalf("replay confirmed = %d:\n%s", status, body)
	}
	left := w.deadIDs(t, "")
	if want := []string{ids[0], ids[3], ids[4]}; strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("left %v, want %v: exactly the two selected move", left, want)
	}
	if got := w.xlen(t, w.in) - before; got != 2 {
		t.Fatalf("the stream grew by %d, want the 2 replayed", got)
	}
}

func TestPurgeConfirmsThenDeletesTheMatchingOnly(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	form := url.Values{"csrf": {token(t, body)}, "scope": {"matching"}, "reason": {"no attempts cap"}}
	_, body = post(t, cl, srv.URL+"/mounts/refunds/purge", form)
	if !strings.Contains(body, `<strong id="confirm-count">`+strconv.Itoa(deadNoCap)+`</strong>`) {
		t.Fatalf("purge of the matching: no confirmation of %d:\n%s", deadNoCap, body)
	}
	post(t, cl, srv.URL+"/mounts/refunds/purge", confirmation(t, body))
	if left := w.deadIDs(t, ""); len(left) != deadCapped || len(w.deadIDs(t, "no attempts cap")) != 0 {
		t.Fatalf("left %v, want the %d capped only", left, deadCapped)
	}
}

// TestAConfirmedActionOnAllMatchingActsOnWhatWasShownNotOnArrivals is rule 1 of issue
// 23 in the console: dead letters that arrive between the confirmation and the click
// are not touched, with each filter, for a purge and a replay.
func TestAConfirmedActionOnAllMatchingActsOnWhatWasShownNotOnArrivals(t *testing.T) {
	t.Parallel()
	for name, filter := range map[string]url.Values{
		"none": {}, "reason": {"reason": {"no attempts cap"}}, "error": {"error": {"account closed"}},
		"since": {"since": {"2000-01-01T00:00"}},
	} {
		for _, verb := range []string{"purge", "replay"} {
			t.Run(name+"/"+verb, func(t *testing.T) {
				t.Parallel()
				w, srv, cl := seeded(t, console.Options{})
				_, body := get(t, cl, srv.URL+"/mounts/refunds")
				form := url.Values{"csrf": {token(t, body)}, "scope": {"matching"}}
				for k, v := range filter {
					form[k] = v
				}
				_, body = post(t, cl, srv.URL+"/mounts/refunds/"+verb, form)
				shown := len(w.deadIDs(t, filter.Get("reason")))
				if filter.Get("error") != "" {
					shown = deadNoCap
				}
				if !strings.Contains(body, `<strong id="confirm-count">`+strconv.Itoa(shown)+`</strong>`) {
					t.Fatalf("no confirmation of %d:\n%s", shown, body)
				}
				w.addDead(t, 5) // they arrive before the click
				_, body = post(t, cl, srv.URL+"/mounts/refunds/"+verb, confirmation(t, body))
				if want := fmt.Sprintf("%s %d dead letter", map[string]string{"purge": "Purged", "replay": "Replayed"}[verb], shown); !strings.Contains(body, want) {
					t.Fatalf("the result does not say %q:\n%s", want, body)
				}
				if left := w.xlen(t, w.dead); left != int64(deadTotal-shown+5) {
					t.Fatalf("%d dead letters left, want %d: the 5 arrivals untouched", left, deadTotal-shown+5)
				}
			})
		}
	}
}

func TestAPOSTWithoutTheCSRFTokenIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	resp, err := http.Get(srv.URL + "/mounts/refunds")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); len(cs) != 1 || cs[0].SameSite != http.SameSiteStrictMode || !cs[0].HttpOnly {
		t.Fatalf("the page set cookies %+v, want one CSRF cookie, SameSite=Strict and HttpOnly", cs)
	}
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	ids := w.deadIDs(t, "")
	for name, tok := range map[string]string{"none": "", "forged": strings.Repeat("ab", 32), "of another page": token(t, body) + "00"} {
		form := url.Values{"scope": {"selected"}, "id": ids, "confirm": {"yes"}}
		if tok != "" {
			form.Set("csrf", tok)
		}
		if status, _ := post(t, cl, srv.URL+"/mounts/refunds/replay", form); status != http.StatusForbidden {
			t.Fatalf("token %s: %d, want 403", name, status)
		}
	}
	// The right token without its cookie (another browser) is refused too.
	form := url.Values{"scope": {"selected"}, "id": ids, "confirm": {"yes"}, "csrf": {token(t, body)}}
	if status, _ := post(t, http.DefaultClient, srv.URL+"/mounts/refunds/replay", form); status != http.StatusForbidden {
		t.Fatalf("a token without its cookie: %d, want 403", status)
	}
	if n := w.xlen(t, w.dead); n != deadTotal {
		t.Fatalf("%d dead letters left, want all %d", n, deadTotal)
	}
}

func TestReadOnlyRendersNoActionAndRefusesEveryPOST(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{ReadOnly: true})
	for _, p := range []string{"/", "/mounts/refunds", "/mounts/refunds/dead/" + w.deadIDs(t, "")[0]} {
		status, body := get(t, cl, srv.URL+p)
		if status != http.StatusOK || strings.Contains(body, `method="post"`) || strings.Contains(body, `name="csrf"`) {
			t.Fatalf("GET %s in read-only mode = %d with a POST form:\n%s", p, status, body)
		}
	}
	for _, a := range []string{"replay", "purge", "pause", "resume", "promote", "nothing"} {
		form := url.Values{"scope": {"matching"}, "confirm": {"yes"}, "member": {"x"}}
		if status, body := post(t, cl, srv.URL+"/mounts/refunds/"+a, form); status != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Fatalf("POST %s in read-only mode = %d, want 403 saying read-only:\n%s", a, status, body)
		}
	}
	if n := w.xlen(t, w.dead); n != deadTotal {
		t.Fatalf("%d dead letters left, want all %d", n, deadTotal)
	}
}

func TestPauseAndResumeSetAndClearTheMountsControlKey(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	tok := token(t, body)
	if status, body := post(t, cl, srv.URL+"/mounts/refunds/pause", url.Values{"csrf": {tok}}); status != http.StatusOK || !strings.Contains(body, "Paused mount refunds") {
		t.Fatalf("pause = %d:\n%s", status, body)
	}
	if n, _ := w.rdb.Exists(w.ctx, "{console-"+w.prefix[9:len(w.prefix)-1]+"}:refunds:paused:refunds").Result(); n != 1 {
		t.Fatal("pause did not set the mount's control key")
	}
	if _, body := get(t, cl, srv.URL+"/"); !strings.Contains(body, `<span class="badge paused">paused</span>`) {
		t.Fatalf("the overview does not show the mount paused:\n%s", body)
	}
	post(t, cl, srv.URL+"/mounts/refunds/resume", url.Values{"csrf": {tok}})
	if _, body := get(t, cl, srv.URL+"/mounts/refunds"); !strings.Contains(body, `id="state">running`) {
		t.Fatalf("after resume the mount is not running:\n%s", body)
	}
}

func TestPromoteMakesADelayedRetryDueNow(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	m := regexp.MustCompile(`name="member" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no delayed member to promote:\n%s", body)
	}
	status, body := post(t, cl, srv.URL+"/mounts/refunds/promote", url.Values{"csrf": {token(t, body)}, "member": {m[1]}})
	if status != http.StatusOK || !strings.Contains(body, `<strong id="confirm-count">1</strong>`) || !strings.Contains(body, "<code>"+m[1]+"</code>") {
		t.Fatalf("promote asks no confirmation naming %s: %d:\n%s", m[1], status, body)
	}
	if _, body := get(t, cl, srv.URL+"/mounts/refunds"); strings.Contains(body, `<span class="badge warn">overdue</span>`) {
		t.Fatal("the confirmation promoted the member")
	}
	if status, body := post(t, cl, srv.URL+"/mounts/refunds/promote", confirmation(t, body)); status != http.StatusOK || !strings.Contains(body, "Promoted 1 delayed retry of the 1 confirmed") {
		t.Fatalf("promote = %d:\n%s", status, body)
	}
	if _, body := get(t, cl, srv.URL+"/mounts/refunds"); !strings.Contains(body, `<span class="badge warn">overdue</span>`) {
		t.Fatalf("the promoted member is not shown overdue (first):\n%s", body)
	}
}

func TestDeadLetterPageShowsHeadersDecodedPayloadAndHistory(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	id := w.deadIDs(t, "max attempts")[0]
	status, body := get(t, cl, srv.URL+"/mounts/refunds/dead/"+id)
	for _, want := range []string{`"card":"4111-unavail-`, "processor unavailable", "max attempts reached (3 of 3)", "<dd>3</dd>", "region", w.in} {
		if !strings.Contains(strings.ReplaceAll(body, "&#34;", `"`), want) {
			t.Fatalf("dead letter page (%d) lacks %q:\n%s", status, want, body)
		}
	}
	if status, _ := get(t, cl, srv.URL+"/mounts/refunds/dead/1-1"); status != http.StatusNotFound {
		t.Fatalf("an id not there = %d, want 404", status)
	}
}

func TestNewRefusesOptionsThatNameNothingValid(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]console.Options{
		"no admin":       {Mounts: []console.Mount{{Key: "k", Kind: console.KindList}}},
		"unknown kind":   {Admin: nil, Mounts: []console.Mount{{Key: "k", Kind: "queue"}}},
		"no group":       {Mounts: []console.Mount{{Key: "k", Kind: console.KindStream}}},
		"bad prefix":     {Prefix: "settle/"},
		"inbox no Inbox": {Inboxes: []console.Inbox{{Name: "x"}}},
	} {
		if _, err := console.New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}
