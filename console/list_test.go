package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
)

// listWorld is the world's refunds on a reliable list instead: three dead-lettered at a
// cap of 2 into a dead-letter list, one acked.
func listWorld(t *testing.T) (w *world, jobs, dlq string) {
	t.Helper()
	w = newWorld(t)
	jobs, dlq = w.prefix+":jobs", w.prefix+":jobs.dlq"
	pub := settle.NewPublisher(w.rdb)
	for id, c := range []string{"4000-ok-1", "4111-unavail-1", "4111-unavail-2", "4111-unavail-3"} {
		if err := pub.PublishList(w.ctx, jobs, Refund{Card: c, ID: uint64(id + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	runApp(t, 4, 0, func(app *settle.App) {
		app.Mount(settle.ReliableList(w.rdb, jobs, settle.Block(50*time.Millisecond)), settle.Typed(processor),
			settle.MaxAttempts(2), settle.DeadLetter(dlq), noBackoff)
	})
	return w, jobs, dlq
}

func TestAListMountNamedByItsKeyShowsItsDeadLettersAndReplaysTheSelectedByIndex(t *testing.T) {
	t.Parallel()
	w, jobs, dlq := listWorld(t)
	srv, cl := w.serve(t, console.Options{Mounts: []console.Mount{{Kind: console.KindReliableList, Key: jobs, DeadLetter: dlq}}})
	_, body := get(t, cl, srv.URL+"/")
	if !strings.Contains(body, `data-dead="3"`) {
		t.Fatalf("the overview does not count the list's 3 dead letters:\n%s", body)
	}
	m := regexp.MustCompile(`<th scope="row"><a href="([^"]+)">`).FindStringSubmatch(body)
	if m == nil || m[1] != "/mounts/"+url.PathEscape(jobs) {
		t.Fatalf("the overview links the mount as %v, want its key escaped", m)
	}
	page := srv.URL + m[1]
	status, body := get(t, cl, page)
	if status != http.StatusOK || strings.Count(body, `<tr data-id="`) != 3 {
		t.Fatalf("GET %s = %d, want its 3 dead letters:\n%s", page, status, body)
	}
	insp := admin.NewInspector(w.rdb)
	before, err := insp.ListDeadLetters(w.ctx, dlq, admin.Filter{}, 0)
	if err != nil || len(before) != 3 {
		t.Fatalf("the dead-letter list: %d, %v", len(before), err)
	}
	picked := string(before[1].Payload)
	if status, body := get(t, cl, page+"/dead/1"); status != http.StatusOK || !strings.Contains(body, "4111-unavail-") {
		t.Fatalf("the list's dead letter 1 = %d:\n%s", status, body)
	}
	form := url.Values{"csrf": {token(t, body)}, "scope": {"selected"}, "id": {"1"}, "confirm": {"yes"}}
	if _, body := post(t, cl, page+"/replay", form); !strings.Contains(body, "Replayed 1 dead letter of") {
		t.Fatalf("the list replay's result:\n%s", body)
	}
	left, err := insp.ListDeadLetters(w.ctx, dlq, admin.Filter{}, 0)
	if err != nil || len(left) != 2 || string(left[0].Payload) == picked || string(left[1].Payload) == picked {
		t.Fatalf("left %d dead letters (%v), want the 2 not selected", len(left), err)
	}
	if n, err := w.rdb.LLen(w.ctx, jobs).Result(); err != nil || n != 1 {
		t.Fatalf("the list holds %d (%v), want the 1 replayed", n, err)
	}
}
