package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/delayed"
)

// wanderer runs a Stream mount (cap 4, a durable delay set, a dead letter) whose
// handler retries a payment at once on its first two attempts, parks it for an hour on
// the third and fails the fourth. It publishes that payment (header order=42) and one
// other (order=43, acked at once) and waits until the first is parked. It returns the
// first's id, the delay set, the scope to search and a function that promotes the
// parked copy and waits for its dead letter.
func (b *testBundle) wanderer(t *testing.T) (origin, set string, scope admin.FindScope, deadLetter func()) {
	t.Helper()
	set = b.r.Key("delayed")
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Headers["order"] != "42" {
			return nil
		}
		switch m.Attempt {
		case 1, 2:
			return settle.Retry(errors.New("provider busy"))
		case 3:
			return settle.RetryAfter(time.Hour, errors.New("provider down for maintenance"))
		}
		return errors.New("card declined")
	})
	src := settle.Stream(b.r.Client, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1"))
	rec, stop := b.start(t, src, h, settle.MaxAttempts(4), settle.DeadLetter(b.dlq), settle.DelayIn(delayed.DurableZset{Key: set}))
	pub := settle.NewPublisher(b.r.Client)
	origin, err := pub.Publish(b.ctx, b.in, payment{Card: "4242", ID: 42}, settle.Headers(map[string]string{"order": "42"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(b.ctx, b.in, payment{Card: "4343", ID: 43}, settle.Headers(map[string]string{"order": "43"})); err != nil {
		t.Fatal(err)
	}
	settled := func(n int) {
		rec.WaitFor(t, waitBound, fmt.Sprintf("%d settlements", n), func(evs []settle.Settled) bool { return len(evs) >= n })
	}
	settled(4) // three of 42 (the third parks it), one of 43
	scope = admin.FindScope{Mount: "payments", Stream: b.in, Group: b.group, Delayed: set, DeadLetter: b.dlq}
	deadLetter = func() {
		t.Helper()
		if _, err := b.insp.Promote(b.ctx, set, admin.DelayFilter{All: true}); err != nil {
			t.Fatal(err)
		}
		settled(5)
		stop()
	}
	return origin, set, scope, deadLetter
}

// kinds is the places as "kind@key" in their order.
func kinds(ps []admin.Place) string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.Kind)+"@"+p.Key)
	}
	return strings.Join(out, " ")
}

func TestFindByOriginIDShowsEveryCopyOfAMessageRetriedTwiceParkedThenDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	origin, set, scope, deadLetter := b.wanderer(t)

	f, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: origin})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{"settled@" + b.in, "settled@" + b.in, "settled@" + b.in, "delayed@" + set}, " ")
	if got := kinds(f.Places); got != want {
		t.Fatalf("parked: places %s, want %s (%+v)", got, want, f.Places)
	}
	if f.Places[0].ID != origin || f.Places[2].RetryCount != 2 || f.Places[3].Due.Before(f.Now.Add(50*time.Minute)) {
		t.Fatalf("parked: places %+v; want the origin first, the second retry copy at retry count 2, the parked copy due in an hour", f.Places)
	}
	for _, p := range f.Places {
		if p.OriginID != origin || p.Mount != "payments" {
			t.Fatalf("place %+v: want origin %s, mount payments", p, origin)
		}
	}
	if len(f.Origins) != 1 || f.Origins[0] != origin || !f.Query.Since.Equal(admin.IDTime(origin)) {
		t.Fatalf("origins %v, since %v; want %s and its time", f.Origins, f.Query.Since, origin)
	}

	deadLetter()
	f, err = b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: origin})
	if err != nil {
		t.Fatal(err)
	}
	want = strings.Join([]string{"settled@" + b.in, "settled@" + b.in, "settled@" + b.in, "settled@" + b.in, "dead-letter@" + b.dlq}, " ")
	if got := kinds(f.Places); got != want {
		t.Fatalf("dead-lettered: places %s, want %s (%+v)", got, want, f.Places)
	}
	dead := f.Places[4]
	if dead.Error != "card declined" || !strings.Contains(dead.Reason, "4 of 4") || dead.RetryCount != 4 {
		t.Fatalf("the dead letter's place %+v: want the last error, the reason, 4 attempts", dead)
	}
	// Any copy's id finds the same places: the search starts from the origin's time.
	byCopy, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: f.Places[2].ID})
	if err != nil || kinds(byCopy.Places) != want {
		t.Fatalf("by a retry copy's id: %v, %v; want %s", kinds(byCopy.Places), err, want)
	}
	byDead, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: dead.ID})
	if err != nil || kinds(byDead.Places) != want {
		t.Fatalf("by the dead letter's id: %v, %v; want %s", kinds(byDead.Places), err, want)
	}
}

func TestFindFollowsAReplayAndAReplyAndTellsPendingFromWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	origin, _, scope, deadLetter := b.wanderer(t)
	deadLetter()
	replies := b.r.Key("replies")
	scope.Replies = []string{replies}
	rdb := b.r.Client

	res, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{})
	if err != nil || len(res.Replayed) != 1 {
		t.Fatalf("Replay = %+v, %v", res, err)
	}
	replayed := res.Replayed[0].NewID
	// A consumer reads the replayed copy and dies holding it; a reply answers it.
	if _, err := rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "gone", Streams: []string{b.in, ">"}, Count: 1}).Result(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: replies, Values: map[string]any{settle.HeaderReplyOf: replayed, "payload": "ok"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: replies, Values: map[string]any{settle.HeaderReplyOf: "1-1", "payload": "other"}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The dead letter is gone with the replay: search by the header the producer set.
	f, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{Header: "order", Value: "42"})
	if err != nil {
		t.Fatal(err)
	}
	var last, reply admin.Place
	for _, p := range f.Places {
		if p.ID == replayed && p.Key == b.in { // a reply's id in its own stream may be the same
			last = p
		}
		if p.Kind == admin.PlaceReply {
			reply = p
		}
	}
	if last.Kind != admin.PlacePending || last.Consumer != "gone" || last.Deliveries != 1 || last.ReplayedFrom == "" || !strings.HasPrefix(last.ReplayedFrom, b.dlq+"/") {
		t.Fatalf("the replayed copy's place %+v: want pending at gone, delivered once, replayed from the dead letter (%s)", last, kinds(f.Places))
	}
	if reply.Key != replies || reply.ReplyOf != replayed {
		t.Fatalf("the reply's place %+v: want the reply to %s in %s", reply, replayed, replies)
	}
	if n := strings.Count(kinds(f.Places), "reply@"); n != 1 {
		t.Fatalf("places %s: want the one reply to this message", kinds(f.Places))
	}
	for _, p := range f.Places {
		if p.Kind != admin.PlaceReply && p.ID != replayed && p.OriginID != origin {
			t.Fatalf("place %+v is not a copy of %s", p, origin)
		}
	}

	// An operator dead-letters the replayed copy, a first delivery of its own: its dead
	// letter carries no origin id, and is found by the id it had.
	if _, err := b.insp.DeadLetterPending(b.ctx, b.in, b.group, []string{replayed}, b.dlq); err != nil {
		t.Fatal(err)
	}
	f, err = b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: replayed})
	if err != nil || !strings.Contains(kinds(f.Places), "settled@"+b.in) || !strings.Contains(kinds(f.Places), "dead-letter@"+b.dlq) {
		t.Fatalf("find the replayed copy dead-lettered by an operator: %s, %v; want it settled and its dead letter", kinds(f.Places), err)
	}

	// Published after everything: waiting for the group.
	id, err := settle.NewPublisher(rdb).Publish(b.ctx, b.in, payment{Card: "4444", ID: 44})
	if err != nil {
		t.Fatal(err)
	}
	f, err = b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: id})
	if err != nil || kinds(f.Places) != "waiting@"+b.in {
		t.Fatalf("a new entry: %s, %v; want it waiting", kinds(f.Places), err)
	}
}

func TestFindIsBoundedAndSaysWhatItRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rdb := b.r.Client
	var first string
	for k := range 30 {
		id, err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.in, Values: map[string]any{"order": fmt.Sprint(k % 3), "payload": "x"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			first = id
		}
	}
	scope := admin.FindScope{Stream: b.in, DeadLetter: b.dlq}
	f, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{Header: "order", Value: "1", Scan: 10, Limit: 2, Since: admin.IDTime(first)})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Scanned) != 2 || f.Scanned[0].Read != 10 || f.Scanned[0].Complete || f.Scanned[0].Total != 30 || f.Scanned[1].Total != 0 || !f.Scanned[1].Complete {
		t.Fatalf("scanned %+v: want 10 of the 30 entries read, not complete; the missing dead letter read whole", f.Scanned)
	}
	if len(f.Places) != 2 || !f.Limited || f.Places[0].Kind != admin.PlaceInStream {
		t.Fatalf("places %+v (limited %v): want the first 2 of the 3 matches among the 10 read", f.Places, f.Limited)
	}
	if _, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{}); err == nil {
		t.Fatal("a query with neither id nor header was accepted")
	}
	if err := rdb.Set(b.ctx, b.dlq, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: first}); !errors.Is(err, admin.ErrWrongType) {
		t.Fatalf("a dead letter of the wrong type: %v, want ErrWrongType", err)
	}
}

func TestParseFindQueryReadsAnIDOrAHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     admin.FindQuery
		err      bool
	}{
		{name: "EntryID", in: "1700000000000-3", want: admin.FindQuery{ID: "1700000000000-3"}},
		{name: "Milliseconds", in: " 1700000000000 ", want: admin.FindQuery{ID: "1700000000000-0"}},
		{name: "Header", in: "order = 42", want: admin.FindQuery{Header: "order", Value: "42"}},
		{name: "HeaderWithEquals", in: "q=a=b", want: admin.FindQuery{Header: "q", Value: "a=b"}},
		{name: "ListOriginID", in: "35dff2cf1947:1", want: admin.FindQuery{ID: "35dff2cf1947:1"}},
		{name: "NoName", in: "=42", err: true},
		{name: "Neither", in: "order 42", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := admin.ParseFindQuery(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseFindQuery(%q) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestPendingAndDelayedMemberReadOneEntryOrMemberByItsName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	origin, set, _, deadLetter := b.wanderer(t)
	members, err := b.insp.DelayedMembers(b.ctx, set, 0)
	if err != nil || len(members) != 1 {
		t.Fatalf("DelayedMembers = %+v, %v", members, err)
	}
	m, err := b.insp.DelayedMember(b.ctx, set, members[0].Handle)
	if err != nil || m.Member != members[0].Member || !m.Due.Equal(members[0].Due) || m.Headers[settle.HeaderOriginID] != origin || len(m.Payload) == 0 {
		t.Fatalf("DelayedMember(%s) = %+v, %v; want the parked copy of %s, its due time and payload", members[0].Handle, m, err, origin)
	}
	if _, err := b.insp.DelayedMember(b.ctx, set, "1-1"); !errors.Is(err, admin.ErrMemberNotFound) {
		t.Fatalf("DelayedMember of a handle not there: %v, want ErrMemberNotFound", err)
	}

	deadLetter() // the App stops: what is read now stays pending
	id, err := settle.NewPublisher(b.r.Client).Publish(b.ctx, b.in, payment{Card: "4444", ID: 44})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.r.Client.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "gone", Streams: []string{b.in, ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := b.insp.Pending(b.ctx, b.in, b.group, id)
	if err != nil || p.Consumer != "gone" || p.Deliveries != 1 {
		t.Fatalf("Pending(%s) = %+v, %v; want it held by gone, delivered once", id, p, err)
	}
	if _, err := b.insp.Pending(b.ctx, b.in, b.group, origin); !errors.Is(err, admin.ErrNotPending) {
		t.Fatalf("Pending of a settled entry: %v, want ErrNotPending", err)
	}
}

func TestDelayedPageReadsOnePageFromAPositionAndPeekCutCutsALargePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rdb := b.r.Client
	set := b.r.Key("delayed")
	for k := range 5 {
		if err := rdb.ZAdd(b.ctx, set, redis.Z{Score: float64(1000 + k), Member: fmt.Sprintf("%d-0\nm", k+1)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	page, err := b.insp.DelayedPage(b.ctx, set, 3, 10)
	if err != nil || len(page) != 2 || page[0].Handle != "4-0" || page[1].Handle != "5-0" {
		t.Fatalf("DelayedPage(3, 10) = %+v, %v; want the 4th and 5th due", page, err)
	}
	if _, err := b.insp.DelayedPage(b.ctx, set, 0, admin.MaxPendingPage+1); err == nil {
		t.Fatal("a page past MaxPendingPage was read")
	}
	big := strings.Repeat("x", admin.PageCut+10)
	id, err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.in, Values: map[string]any{"payload": big}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.insp.PeekCut(b.ctx, b.in, id, settle.Raw)
	if err != nil || !p.Cut || p.Size != int64(len(big)) || len(p.Payload) != admin.PageCut {
		t.Fatalf("PeekCut = cut %v, size %d, %d bytes, %v; want the first PageCut of %d", p.Cut, p.Size, len(p.Payload), err, len(big))
	}
}

func TestFindSearchesAListMountsListAndDeadLetterList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	list, dead := b.r.Key("jobs"), b.r.Key("jobs.dlq")
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("card declined") })
	rec, stop := b.start(t, settle.List(b.r.Client, list), h, settle.MaxAttempts(2), settle.DeadLetter(dead))
	pub := settle.NewPublisher(b.r.Client)
	if err := pub.PublishList(b.ctx, list, payment{Card: "4242", ID: 7}, settle.Headers(map[string]string{"order": "7"})); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitBound, "the dead letter", func(evs []settle.Settled) bool { return len(evs) >= 2 })
	stop()
	// Another order 7 waits in the list, read by no one.
	if err := pub.PublishList(b.ctx, list, payment{Card: "4242", ID: 8}, settle.Headers(map[string]string{"order": "7"})); err != nil {
		t.Fatal(err)
	}
	scope := admin.FindScope{Mount: "jobs", List: list, DeadLetterList: dead}
	f, err := b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{Header: "order", Value: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(f.Places), "waiting@"+list+" dead-letter@"+dead; got != want {
		t.Fatalf("find order=7: %s, want %s", got, want)
	}
	if d := f.Places[1]; d.ID != "0" || d.Error != "card declined" || d.OriginID == "" || d.Time.IsZero() {
		t.Fatalf("the dead letter's place %+v: want index 0, its error, its origin, when", d)
	}
	if len(f.Scanned) != 2 || f.Scanned[0].Read != 1 || !f.Scanned[0].Complete || f.Scanned[1].Read != 1 {
		t.Fatalf("scanned %+v: want the list's one item and the dead letter read whole", f.Scanned)
	}
	// By its origin id, the dead letter alone (the list keeps no first delivery).
	origin := f.Places[1].OriginID
	f, err = b.insp.Find(b.ctx, []admin.FindScope{scope}, admin.FindQuery{ID: origin})
	if err != nil || kinds(f.Places) != "dead-letter@"+dead {
		t.Fatalf("find by the origin id %s: %v; want the dead letter", origin, err)
	}
}
