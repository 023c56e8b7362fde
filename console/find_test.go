package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
)

// placesRe reads the rows of the search's answer: kind, id and link.
var placesRe = regexp.MustCompile(`<tr data-kind="([^"]+)" data-id="([^"]+)">.*?<a href="([^"]+)">`)

// places are the rows of a search's answer as "kind id → link".
func places(body string) []string {
	var out []string
	for _, m := range placesRe.FindAllStringSubmatch(strings.ReplaceAll(body, "\n", " "), -1) {
		out = append(out, m[1]+" "+m[2]+" → "+m[3])
	}
	return out
}

func TestFindByOriginIDShowsTheCopiesParkedThenDeadLetteredEachLinkedToItsPage(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	origin, deadLetter := w.wander(t)

	status, body := get(t, cl, srv.URL+"/find?q="+url.QueryEscape(origin))
	got := places(body)
	if status != http.StatusOK || len(got) != 4 || !strings.HasPrefix(got[0], "settled "+origin+" → /mounts/refunds") ||
		!strings.HasPrefix(got[3], "delayed ") || !strings.Contains(got[3], "/mounts/refunds/delayed?member=") {
		t.Fatalf("find %s while parked = %d, places %q; want the first delivery, two retry copies settled, the parked copy", origin, status, got)
	}
	if !strings.Contains(body, `id="find-count">4<`) || !strings.Contains(body, "all of it") {
		t.Fatalf("the answer does not count 4 places or say what it read:\n%s", body)
	}

	deadLetter()
	_, body = get(t, cl, srv.URL+"/find?q="+url.QueryEscape(origin))
	got = places(body)
	if len(got) != 5 || !strings.HasPrefix(got[4], "dead-letter ") || !strings.Contains(got[4], "/mounts/refunds/dead/") || !strings.Contains(body, "card account closed") {
		t.Fatalf("find %s after the dead letter: places %q; want 4 settled copies and the dead letter linked to its page", origin, got)
	}
	_, dead, _ := strings.Cut(got[4], "→ ")
	if status, page := get(t, cl, srv.URL+dead); status != http.StatusOK || !strings.Contains(page, "card account closed") {
		t.Fatalf("the dead letter's link %s = %d", dead, status)
	}
	// The header the producer set finds the same message.
	if _, body := get(t, cl, srv.URL+"/find?q="+url.QueryEscape("order=4555")); len(places(body)) != 5 {
		t.Fatalf("find order=4555: places %q, want the same 5", places(body))
	}
}

func TestTheNewPagesAskATokenConsolesTokenFirst(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{Auth: console.Auth{Token: "s3cret"}})
	for _, p := range []string{"/find?q=" + okID(t, w), "/mounts/refunds/pending/" + okID(t, w), "/mounts/refunds/delayed?member=1-1"} {
		if status, body := get(t, cl, srv.URL+p); status != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || strings.Contains(body, "refunds.dlq") {
			t.Fatalf("%s before signing in = %d, want the login form only:\n%s", p, status, body)
		}
	}
}

func TestFindRefusesAQueryItCannotReadAndAForeignHost(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	if status, body := get(t, cl, srv.URL+"/find?q=nothing+useful"); status != http.StatusBadRequest || !strings.Contains(body, `id="find-err"`) {
		t.Fatalf("find of an unreadable query = %d:\n%s", status, body)
	}
	if status, body := get(t, cl, srv.URL+"/find"); status != http.StatusOK || !strings.Contains(body, `id="find-q"`) {
		t.Fatalf("the empty search page = %d", status)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/find?q=1-1", nil)
	req.Host = "attacker.example"
	if resp, _ := do(t, cl, req); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("find with Host attacker.example = %d, want 421", resp.StatusCode)
	}
}

func TestFindInAListMountLinksItsDeadLettersByIndex(t *testing.T) {
	t.Parallel()
	w, jobs, dlq := listWorld(t)
	srv, cl := w.serve(t, console.Options{Mounts: []console.Mount{{Name: "jobs", Kind: console.KindReliableList, Key: jobs, DeadLetter: dlq}}})
	dls, err := admin.NewInspector(w.rdb).ListDeadLetters(w.ctx, dlq, admin.Filter{}, 0)
	if err != nil || len(dls) != 3 {
		t.Fatalf("the dead-letter list: %d, %v", len(dls), err)
	}
	origin := dls[1].Headers[settle.HeaderOriginID]
	_, body := get(t, cl, srv.URL+"/find?q="+url.QueryEscape(origin))
	got := places(body)
	if len(got) != 1 || got[0] != "dead-letter 1 → /mounts/jobs/dead/1" {
		t.Fatalf("find %s in the list mount: %q, want its dead letter at index 1, linked", origin, got)
	}
}
