package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
)

// do sends req with cl and returns the response, its body read.
func do(t *testing.T, cl *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (w *world) paused(t *testing.T) bool {
	t.Helper()
	n, err := w.rdb.Exists(w.ctx, w.prefix+":refunds:paused:refunds").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestADNSRebindingRequestIsRefusedAndChangesNothing: a page of attacker.example whose
// name now resolves to the loopback console sends Host: attacker.example; the console
// answers none of it, a POST carrying a token read from a page (and the attacker's own
// Origin) pauses nothing.
func TestADNSRebindingRequestIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	tok := token(t, body)
	get, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	get.Host = "attacker.example"
	if resp, _ := do(t, cl, get); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("GET / with Host attacker.example = %d, want 421", resp.StatusCode)
	}
	u, _ := url.Parse(srv.URL)
	post, _ := http.NewRequest(http.MethodPost, srv.URL+"/mounts/refunds/pause", strings.NewReader(url.Values{"csrf": {tok}}.Encode()))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.Host = "attacker.example:" + u.Port()
	post.Header.Set("Origin", "http://attacker.example:"+u.Port())
	post.Header.Set("Sec-Fetch-Site", "same-origin") // as the rebound page sees itself
	if resp, _ := do(t, cl, post); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("POST pause with Host attacker.example = %d, want 421", resp.StatusCode)
	}
	if w.paused(t) {
		t.Fatal("a rebound POST paused the mount")
	}
}

// TestAHostNamedInAllowedHostsIsServed: the names the user allows, and only those, are
// answered besides IP addresses and localhost.
func TestAHostNamedInAllowedHostsIsServed(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{AllowedHosts: []string{"console.internal"}})
	for host, want := range map[string]int{
		"console.internal": 200, "console.internal:8080": 200, "CONSOLE.internal": 200, "localhost:1": 200,
		"[::1]:8080": 200, "10.0.0.7": 200, "other.internal": 421, "console.internal.attacker.example": 421,
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Host = host
		if resp, _ := do(t, cl, req); resp.StatusCode != want {
			t.Errorf("Host %s = %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestACrossOriginPOSTIsRefusedByCrossOriginProtection: a POST another site's page
// sends (Sec-Fetch-Site: cross-site, or an Origin that is not the Host) is refused with
// 403 even with a valid token and cookie, and changes nothing.
func TestACrossOriginPOSTIsRefusedByCrossOriginProtection(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	tok := token(t, body)
	for name, h := range map[string]map[string]string{
		"sec-fetch-site": {"Sec-Fetch-Site": "cross-site"},
		"same-site":      {"Sec-Fetch-Site": "same-site"},
		"origin":         {"Origin": "http://evil.example"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mounts/refunds/pause", strings.NewReader(url.Values{"csrf": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if resp, _ := do(t, cl, req); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: POST pause = %d, want 403", name, resp.StatusCode)
		}
	}
	if w.paused(t) {
		t.Fatal("a cross-origin POST paused the mount")
	}
}

// TestEveryResponseCarriesTheSecurityHeaders: pages, static files, errors, refusals
// and the login page all say nosniff, frame-ancestors 'none' and a CSP without inline
// script.
func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	_, lsrv, lcl := seeded(t, console.Options{Auth: console.Auth{Token: "s3cret"}})
	reqs := map[string]*http.Request{}
	for _, p := range []string{"/", "/mounts/refunds", "/static/console.css", "/static/console.js", "/mounts/none", "/static/none"} {
		reqs["GET "+p], _ = http.NewRequest(http.MethodGet, srv.URL+p, nil)
	}
	reqs["POST refused"], _ = http.NewRequest(http.MethodPost, srv.URL+"/mounts/refunds/pause", nil)
	reqs["bad host"], _ = http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	reqs["bad host"].Host = "attacker.example"
	for name, req := range reqs {
		check(t, name, cl, req)
	}
	login, _ := http.NewRequest(http.MethodGet, lsrv.URL+"/", nil)
	check(t, "login page", lcl, login)
}

func check(t *testing.T, name string, cl *http.Client, req *http.Request) {
	t.Helper()
	resp, _ := do(t, cl, req)
	h := resp.Header
	csp := h.Get("Content-Security-Policy")
	if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(csp, "frame-ancestors 'none'") ||
		!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("%s (%d): headers %v, want nosniff and a CSP with frame-ancestors 'none' and no inline script", name, resp.StatusCode, h)
	}
}

// TestATokenConsoleAsksForTheTokenAndRemembersASignIn: without the session cookie a
// page is the login form (401) and an action is refused; a wrong token is refused; the
// right one sets an HttpOnly, SameSite=Strict session cookie; a script may send the
// token as a bearer header.
func TestATokenConsoleAsksForTheTokenAndRemembersASignIn(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{Auth: console.Auth{Token: "s3cret"}})
	status, body := get(t, cl, srv.URL+"/mounts/refunds")
	if status != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || strings.Contains(body, "refunds.dlq") {
		t.Fatalf("a page before signing in = %d, want the login form only:\n%s", status, body)
	}
	if status, _ := post(t, cl, srv.URL+"/mounts/refunds/pause", url.Values{}); status != http.StatusUnauthorized || w.paused(t) {
		t.Fatalf("an action before signing in = %d (paused %v), want 401 and nothing done", status, w.paused(t))
	}
	if status, body := post(t, cl, srv.URL+"/login", url.Values{"token": {"guess"}}); status != http.StatusUnauthorized || !strings.Contains(body, "not this console") {
		t.Fatalf("a wrong token = %d:\n%s", status, body)
	}
	resp, err := cl.PostForm(srv.URL+"/login", url.Values{"token": {"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "settle_console_session" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || strings.Contains(session.Value, "s3cret") {
		t.Fatalf("sign in = %d, cookie %+v; want a redirect and an HttpOnly, Strict session cookie not holding the token", resp.StatusCode, session)
	}
	if status, body := get(t, cl, srv.URL+"/mounts/refunds"); status != http.StatusOK || !strings.Contains(body, "refunds") {
		t.Fatalf("a page after signing in = %d", status)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, _ := do(t, http.DefaultClient, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("a bearer token = %d, want 200", resp.StatusCode)
	}
}

// TestABasicAuthConsoleRefusesWithoutTheCredentials: 401 with a challenge, without or
// with wrong credentials; 200 with them.
func TestABasicAuthConsoleRefusesWithoutTheCredentials(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{Auth: console.Auth{User: "ops", Password: "p@ss word%"}})
	for name, set := range map[string]func(*http.Request){
		"none":  func(*http.Request) {},
		"wrong": func(r *http.Request) { r.SetBasicAuth("ops", "nope") },
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		set(req)
		if resp, _ := do(t, cl, req); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d, want 401 with a challenge", name, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.SetBasicAuth("ops", "p@ss word%")
	if resp, _ := do(t, cl, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("the credentials: %d, want 200", resp.StatusCode)
	}
}

// TestALargePayloadIsShownCutWithALinkToTheWhole: a dead letter whose payload is larger
// than admin.PageCut is shown cut (the page does not carry it), and its download link
// gives every byte back.
func TestALargePayloadIsShownCutWithALinkToTheWhole(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	big := make([]byte, 3*admin.PageCut+17)
	for k := range big {
		big[k] = byte(k * 7)
	}
	id, err := w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: w.dead, Values: []any{"payload", big, settle.HeaderDeadSource, w.in}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	status, body := get(t, cl, srv.URL+"/mounts/refunds/dead/"+id)
	if status != http.StatusOK || !strings.Contains(body, `id="payload-cut"`) || len(body) > 2*admin.PageCut*4 {
		t.Fatalf("the page of a %d-byte payload = %d, %d bytes; want it cut with a note", len(big), status, len(body))
	}
	status, whole := get(t, cl, srv.URL+"/mounts/refunds/dead/"+id+"/payload")
	if status != http.StatusOK || whole != string(big) {
		t.Fatalf("the download = %d, %d bytes; want the %d bytes exactly", status, len(whole), len(big))
	}
	if status, body := get(t, cl, srv.URL+"/mounts/refunds"); status != http.StatusOK || len(body) > 2*admin.PageCut*4 {
		t.Fatalf("the mount page = %d, %d bytes", status, len(body))
	}
}

// TestThePayloadBadgeNamesTheCodecItDecoded: a msgpack payload shown as JSON says
// msgpack; one that does not decode says so.
func TestThePayloadBadgeNamesTheCodecItDecoded(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds/dead/"+w.deadIDs(t, "max attempts")[0])
	if !strings.Contains(body, `id="payload-badge">msgpack, shown as JSON<`) {
		t.Fatalf("the badge of a msgpack payload:\n%s", body)
	}
	id, err := w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: w.dead, Values: []any{"payload", "\xc1 not msgpack", settle.HeaderDeadSource, w.in}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, body = get(t, cl, srv.URL+"/mounts/refunds/dead/"+id); !strings.Contains(body, `id="payload-badge">hex: not msgpack<`) {
		t.Fatalf("the badge of a payload that does not decode:\n%s", body)
	}
}

// TestTheOverviewPutsProblemsFirstInRed: a mount whose entries are held by a consumer
// dead past its reclaim bound comes first, marked a problem with how many entries and
// how long; the mount page says how it judges its consumers.
func TestTheOverviewPutsProblemsFirstInRed(t *testing.T) {
	t.Parallel()
	if os.Getenv("SETTLE_REDIS_URL") == "" {
		t.Skip("miniredis reports no consumer idle time (XINFO CONSUMERS): run with SETTLE_REDIS_URL")
	}
	w := newWorld(t)
	w.seed(t)
	stuck := w.prefix + ":stuck"
	if err := w.rdb.XGroupCreateMkStream(w.ctx, stuck, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3; k++ {
		w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: stuck, Values: []any{"payload", "x"}})
	}
	if err := w.rdb.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "crashed", Streams: []string{stuck, ">"}, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the stuck mount's reclaim bound
	srv, cl := w.serve(t, console.Options{Mounts: []console.Mount{w.mount(),
		{Name: "stuck", Kind: console.KindStream, Key: stuck, Group: "g", ReclaimIdle: 10 * time.Millisecond}}})
	_, page := get(t, cl, srv.URL+"/mounts/stuck")
	if !strings.Contains(page, `badge bad">dead`) || !strings.Contains(page, `id="consumer-rule"`) {
		t.Fatalf("the stuck mount's page does not mark its consumer dead, or say how it judges:\n%s", page)
	}
	problems := strings.Index(page, `id="problems"`)
	if problems < 0 || problems > strings.Index(page, `id="consumers-h"`) || !strings.Contains(page[problems:], `<tr data-consumer="crashed">`) || !strings.Contains(page[problems:], `class="release-consumer"`) {
		t.Fatalf("the stuck mount's page does not put its dead consumer first, with the release of its entries:\n%s", page)
	}
	_, body := get(t, cl, srv.URL+"/")
	first := strings.Index(body, `data-mount="stuck"`)
	if first < 0 || first > strings.Index(body, `data-mount="refunds"`) {
		t.Fatalf("the mount with a problem is not first:\n%s", body)
	}
	row := body[first:]
	for _, want := range []string{`class="problem"`, `badge bad">no live consumer`, "3 entries held by dead consumers"} {
		if !strings.Contains(row, want) {
			t.Fatalf("the stuck mount's row lacks %q:\n%s", want, row)
		}
	}
}

// TestTheConsoleListsPendingEntriesAndActsOnAConsumersOrAll: the mount page lists the
// pending entries with consumer, idle and deliveries; release takes one consumer's,
// dead-lettering takes all, each confirmed with the ids it then acts on.
func TestTheConsoleListsPendingEntriesAndActsOnAConsumersOrAll(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.prefix + ":jobs"
	if err := w.rdb.XGroupCreateMkStream(w.ctx, in, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for k, consumer := range []string{"crashed", "crashed", "crashed", "other", "other"} {
		w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: in, Values: []any{"payload", fmt.Sprint(k)}})
		if err := w.rdb.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: consumer, Streams: []string{in, ">"}, Count: 1, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	srv, cl := w.serve(t, console.Options{Mounts: []console.Mount{{Name: "jobs", Kind: console.KindStream, Key: in, Group: "g", DeadLetter: in + ".dlq"}}})
	_, body := get(t, cl, srv.URL+"/mounts/jobs")
	if n := strings.Count(body, "data-pending="); n != 5 || !strings.Contains(body, `<td data-label="Consumer">crashed</td>`) {
		t.Fatalf("the mount page lists %d pending entries, want 5 with their consumers:\n%s", n, body)
	}
	form := url.Values{"csrf": {token(t, body)}, "scope": {"consumer"}, "consumer": {"crashed"}}
	_, body = post(t, cl, srv.URL+"/mounts/jobs/release", form)
	if !strings.Contains(body, `<strong id="confirm-count">3</strong>`) {
		t.Fatalf("no confirmation of crashed's 3:\n%s", body)
	}
	if _, body = post(t, cl, srv.URL+"/mounts/jobs/release", confirmation(t, body)); !strings.Contains(body, "Released 3 pending entries of the 3 confirmed") {
		t.Fatalf("release:\n%s", body)
	}
	form.Set("scope", "all")
	_, body = post(t, cl, srv.URL+"/mounts/jobs/dead-pending", form)
	if _, body = post(t, cl, srv.URL+"/mounts/jobs/dead-pending", confirmation(t, body)); !strings.Contains(body, "Dead-lettered 5 pending entries of the 5 confirmed") {
		t.Fatalf("dead-letter all:\n%s", body)
	}
	if n, _ := w.rdb.XLen(w.ctx, in+".dlq").Result(); n != 5 {
		t.Fatalf("the dead letter holds %d, want 5", n)
	}
}

// TestTheMountPageListsAPageOfConsumers: a group of many consumers is listed a page at
// a time, saying how many more there are.
func TestTheMountPageListsAPageOfConsumers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	in := w.prefix + ":many"
	if err := w.rdb.XGroupCreateMkStream(w.ctx, in, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 12; k++ {
		if err := w.rdb.XGroupCreateConsumer(w.ctx, in, "g", fmt.Sprintf("c%02d", k)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	srv, cl := w.serve(t, console.Options{PageSize: 5, Mounts: []console.Mount{{Name: "many", Kind: console.KindStream, Key: in, Group: "g"}}})
	if _, body := get(t, cl, srv.URL+"/mounts/many"); !strings.Contains(body, "and 7 more consumers") {
		t.Fatalf("the page of 12 consumers at 5 a page:\n%s", body)
	}
}

// TestTheReasonFilterMatchesTheReasonOrTheLastErrorAsTheCommandDoes: one filter
// language; "unavailable" is in the capped dead letters' error, not their reason.
func TestTheReasonFilterMatchesTheReasonOrTheLastErrorAsTheCommandDoes(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds?reason=unavailable")
	if !strings.Contains(body, fmt.Sprintf(`<strong id="dead-count">%d</strong>`, deadCapped)) {
		t.Fatalf("reason=unavailable does not count the %d whose error says it:\n%s", deadCapped, body)
	}
}
