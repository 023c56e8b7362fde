package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
)

func TestAPendingEntrysPageShowsItsPayloadAndReleasesIt(t *testing.T) {
	t.Parallel()
	w, srv, cl := seeded(t, console.Options{})
	id, err := settle.NewPublisher(w.rdb).Publish(w.ctx, w.in, Refund{AmountCents: 777, Card: "4777-held", ID: 777})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.XReadGroup(w.ctx, &redis.XReadGroupArgs{Group: w.group, Consumer: "crashed", Streams: []string{w.in, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	if !strings.Contains(body, `href="/mounts/refunds/pending/`+id+`"`) {
		t.Fatalf("the mount page does not link the pending entry %s:\n%s", id, body)
	}
	status, body := get(t, cl, srv.URL+"/mounts/refunds/pending/"+id)
	if status != http.StatusOK || !strings.Contains(body, `id="entry-consumer">crashed<`) || !strings.Contains(body, "4777-held") || !strings.Contains(body, `id="entry-error"`) {
		t.Fatalf("the pending entry's page = %d: want its consumer, its payload decoded, its last error's place:\n%s", status, body)
	}
	status, body = post(t, cl, srv.URL+"/mounts/refunds/release", url.Values{"csrf": {token(t, body)}, "id": {id}})
	if status != http.StatusOK || !strings.Contains(body, `<strong id="confirm-count">1</strong>`) {
		t.Fatalf("release from the entry's page asks no confirmation: %d:\n%s", status, body)
	}
	if _, body = post(t, cl, srv.URL+"/mounts/refunds/release", confirmation(t, body)); !strings.Contains(body, "Released 1 pending entry of the 1 confirmed") {
		t.Fatalf("release:\n%s", body)
	}
	if status, _ := get(t, cl, srv.URL+"/mounts/refunds/pending/"+okID(t, w)); status != http.StatusNotFound {
		t.Fatalf("the page of an entry not pending = %d, want 404", status)
	}
}

// okID is the id of the first refund of the seed, acked long ago.
func okID(t *testing.T, w *world) string {
	t.Helper()
	msgs, err := w.rdb.XRangeN(w.ctx, w.in, "-", "+", 1).Result()
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	return msgs[0].ID
}

func TestAParkedMembersPageShowsWhenItIsDueAndItsPayload(t *testing.T) {
	t.Parallel()
	_, srv, cl := seeded(t, console.Options{})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	m := regexp.MustCompile(`href="(/mounts/refunds/delayed\?member=[^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the mount page links no parked member:\n%s", body)
	}
	status, body := get(t, cl, srv.URL+strings.ReplaceAll(m[1], "&amp;", "&"))
	if status != http.StatusOK || !strings.Contains(body, busyCards[0]) || !strings.Contains(body, `id="entry-due"`) || !strings.Contains(body, `id="entry-promote"`) {
		t.Fatalf("the parked member's page = %d: want its payload, its due time, promote:\n%s", status, body)
	}
	if status, _ := get(t, cl, srv.URL+"/mounts/refunds/delayed?member=1-1"); status != http.StatusNotFound {
		t.Fatalf("the page of a member not there = %d, want 404", status)
	}
}

func TestPromoteAllConfirmsTheMembersThenPromotesThoseAndSaysHowManyOfThePageOfN(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for k := range 7 {
		member := fmt.Sprintf("%d-0\nmember %d", k+1, k)
		if err := w.rdb.ZAdd(w.ctx, w.delayed, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli() + int64(k)), Member: member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.rdb.XGroupCreateMkStream(w.ctx, w.in, w.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	srv, cl := w.serve(t, console.Options{PageSize: 3})
	_, body := get(t, cl, srv.URL+"/mounts/refunds")
	if !strings.Contains(body, `id="delay-shown">1–3 of 7`) || strings.Count(body, "<tr data-member=") != 3 {
		t.Fatalf("the first page of the delay set does not say 1–3 of 7:\n%s", body)
	}
	if _, next := get(t, cl, srv.URL+"/mounts/refunds?dfrom=6"); !strings.Contains(next, `id="delay-shown">7–7 of 7`) || !strings.Contains(next, `id="delay-prev"`) {
		t.Fatalf("the last page does not say 7–7 of 7:\n%s", next)
	}
	tok := token(t, body)
	// A foreign Origin is refused, and promotes nothing.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mounts/refunds/promote", strings.NewReader(url.Values{"csrf": {tok}, "scope": {"all"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, _ := do(t, cl, req); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-origin promote-all = %d, want 403", resp.StatusCode)
	}
	_, body = post(t, cl, srv.URL+"/mounts/refunds/promote", url.Values{"csrf": {tok}, "scope": {"all"}})
	if !strings.Contains(body, `<strong id="confirm-count">7</strong>`) {
		t.Fatalf("promote all does not confirm the 7:\n%s", body)
	}
	form := confirmation(t, body)
	// One more arrives after the confirmation: it is not promoted.
	late := "99-0\nlate"
	if err := w.rdb.ZAdd(w.ctx, w.delayed, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: late}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, body = post(t, cl, srv.URL+"/mounts/refunds/promote", form); !strings.Contains(body, "Promoted 7 delayed retries of the 7 confirmed") {
		t.Fatalf("promote all:\n%s", body)
	}
	info, err := admin.NewInspector(w.rdb).DelaySet(w.ctx, w.delayed)
	if err != nil || info.Size != 8 || info.Overdue != 7 {
		t.Fatalf("after promote all: %+v, %v; want the 7 confirmed due, the late one not", info, err)
	}
}
