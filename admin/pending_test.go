package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/sourcetest"
)

// start runs an App with one mount of src and handler h until the test ends (or stop
// is called); the recorder sees its settlements.
func (b *testBundle) start(t *testing.T, src settle.Source, h settle.Handler, opts ...settle.MountOption) (rec *sourcetest.Recorder, stop func()) {
	t.Helper()
	rec = sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(src, h, opts...)
	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = app.Run(ctx) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if runErr != nil {
				t.Errorf("Run: %v", runErr)
			}
		})
	}
	t.Cleanup(stop)
	return rec, stop
}

// stuck publishes n payments and has consumer "gone" of the group read them and die:
// they stay pending at it. It returns their ids.
func (b *testBundle) stuck(t *testing.T, n int) []string {
	t.Helper()
	rdb := b.r.Client
	if err := rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(rdb)
	var ids []string
	for k := range n {
		id, err := pub.Publish(b.ctx, b.in, payment{Card: "4242", ID: k + 1}, settle.Headers(map[string]string{"region": "eu"}))
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "gone", Streams: []string{b.in, ">"}, Count: int64(n), Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// pendingIDs returns the ids pending in the group, by consumer.
func (b *testBundle) pendingIDs(t *testing.T) map[string][]string {
	t.Helper()
	ext, err := b.r.Client.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.in, Group: b.group, Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range ext {
		out[p.Consumer] = append(out[p.Consumer], p.ID)
	}
	return out
}

func TestDeadLetterPendingWritesSettlesDeadLetterAndAcksTheEntryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 2)

	dry, err := b.insp.DeadLetterPending(b.ctx, b.in, b.group, ids[:1], b.dlq, admin.DryRun())
	if err != nil || !dry.DryRun || len(dry.DeadLettered) != 1 || dry.DeadLettered[0].Consumer != "gone" {
		t.Fatalf("dry run = %+v, %v; want %s of gone selected", dry, err, ids[0])
	}
	if n, _ := b.r.Client.Exists(b.ctx, b.dlq).Result(); n != 0 {
		t.Fatalf("the dry run wrote the dead-letter stream")
	}

	res, err := b.insp.DeadLetterPending(b.ctx, b.in, b.group, ids[:1], b.dlq)
	if err != nil || len(res.DeadLettered) != 1 || res.DeadLettered[0].DeadID == "" || len(res.Gone) != 0 {
		t.Fatalf("DeadLetterPending = %+v, %v; want %s dead-lettered", res, err, ids[0])
	}
	dead, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{}, 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %+v, %v; want one", dead, err)
	}
	d := dead[0]
	if d.Reason != admin.ReasonOperator || d.Source != b.in || d.OriginalID != ids[0] || d.Headers[settle.HeaderRetryCount] != "1" || d.Headers["region"] != "eu" {
		t.Fatalf("dead letter %+v, want reason %q, source %s, dead id %s, retry count 1, the region header kept", d, admin.ReasonOperator, b.in, ids[0])
	}
	// An operator-made dead letter carries settle-dead-at and an error saying who held it.
	if at, err := time.Parse(time.RFC3339, d.Headers[settle.HeaderDeadAt]); err != nil || at.IsZero() || !strings.Contains(d.Error, "held by consumer") {
		t.Fatalf("dead letter dead-at %q, error %q; want a time and the consumer that held it", d.Headers[settle.HeaderDeadAt], d.Error)
	}
	if p := b.pendingIDs(t); len(p["gone"]) != 1 || p["gone"][0] != ids[1] {
		t.Fatalf("pending %v, want only %s at gone (the other acked)", p, ids[1])
	}

	_, err = b.insp.DeadLetterPending(b.ctx, b.in, b.group, ids[:1], b.dlq)
	if !errors.Is(err, admin.ErrNotPending) || !contains(err, ids[0]) {
		t.Fatalf("second DeadLetterPending = %v, want ErrNotPending naming %s", err, ids[0])
	}
	if n := b.xlen(t, b.dlq); n != 1 {
		t.Fatalf("the dead-letter stream holds %d after the second call, want 1", n)
	}

	// The dead letter replays as settle's own do: back to its source, attempts reset.
	rep, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{})
	if err != nil || len(rep.Replayed) != 1 || rep.Replayed[0].To != b.in {
		t.Fatalf("Replay = %+v, %v; want it back in %s", rep, err, b.in)
	}
}

func TestPendingActionsRefuseBadInputNamingItAndChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 3)
	if err := b.r.Client.XAck(b.ctx, b.in, b.group, ids[2]).Err(); err != nil {
		t.Fatal(err)
	}
	str := b.r.Key("string")
	if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	other := "{elsewhere}:dlq"
	if keys.Slot(other) == keys.Slot(b.in) {
		t.Fatal("pick another tag")
	}
	slotted := admin.NewInspector(b.r.Client)
	admin.CheckSlots(slotted)
	for _, tc := range []struct {
		name string
		insp *admin.Inspector
		key  string
		grp  string
		ids  []string
		dest string
		is   error
		says string
	}{
		{"NoIDs", b.insp, b.in, b.group, nil, b.dlq, nil, "no entry ids"},
		{"IDThatDoesNotParse", b.insp, b.in, b.group, []string{"12"}, b.dlq, nil, `"12"`},
		{"IDNotInTheStream", b.insp, b.in, b.group, []string{ids[0], "1-1"}, b.dlq, admin.ErrEntryNotFound, "1-1"},
		{"IDNotPending", b.insp, b.in, b.group, []string{ids[0], ids[2]}, b.dlq, admin.ErrNotPending, ids[2]},
		{"MissingGroup", b.insp, b.in, "nobody", ids[:1], b.dlq, admin.ErrGroupNotFound, "nobody"},
		{"MissingKey", b.insp, b.r.Key("nothing"), b.group, ids[:1], b.dlq, admin.ErrKeyNotFound, b.r.Key("nothing")},
		{"KeyOfTheWrongType", b.insp, str, b.group, ids[:1], b.dlq, admin.ErrWrongType, str},
		{"DestOfTheWrongType", b.insp, b.in, b.group, ids[:1], str, admin.ErrWrongType, str},
		{"DestIsTheStream", b.insp, b.in, b.group, ids[:1], b.in, nil, "into the stream itself"},
		{"DestInAnotherSlot", slotted, b.in, b.group, ids[:1], other, admin.ErrCrossSlot, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.insp.DeadLetterPending(b.ctx, tc.key, tc.grp, tc.ids, tc.dest)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !contains(err, tc.says) {
				t.Errorf("DeadLetterPending = %v, want an error (%v) saying %q", err, tc.is, tc.says)
			}
			if tc.name == "DestInAnotherSlot" || strings.HasPrefix(tc.name, "Dest") {
				return // ReleasePending has no destination
			}
			_, err = tc.insp.ReleasePending(b.ctx, tc.key, tc.grp, tc.ids)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !contains(err, tc.says) {
				t.Errorf("ReleasePending = %v, want an error (%v) saying %q", err, tc.is, tc.says)
			}
		})
	}
	if n, _ := b.r.Client.Exists(b.ctx, b.dlq, other).Result(); n != 0 {
		t.Errorf("a refused call wrote a dead-letter stream")
	}
	if p := b.pendingIDs(t); len(p["gone"]) != 2 {
		t.Errorf("pending %v, want ids[0] and ids[1] still at gone", p)
	}
	ext, err := b.r.Client.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.in, Group: b.group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ext {
		if p.Idle > time.Hour {
			t.Errorf("%s was released by a refused call (idle %s)", p.ID, p.Idle)
		}
	}
}

// A released entry of a dead consumer is taken over at once by a mount whose reclaim
// idle is an hour, on its first attempt; a second release changes nothing more.
func TestReleasePendingLetsAMountTakeTheEntryOverAtOnceWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 2)

	res, err := b.insp.ReleasePending(b.ctx, b.in, b.group, ids[:1])
	if err != nil || len(res.Released) != 1 || res.Released[0].ID != ids[0] || res.Released[0].Consumer != "gone" {
		t.Fatalf("ReleasePending = %+v, %v; want %s of gone released", res, err, ids[0])
	}
	again, err := b.insp.ReleasePending(b.ctx, b.in, b.group, ids[:1])
	if err != nil || len(again.Released) != 0 || len(again.Already) != 1 {
		t.Fatalf("second ReleasePending = %+v, %v; want it released already", again, err)
	}
	dry, err := b.insp.ReleasePending(b.ctx, b.in, b.group, ids, admin.DryRun())
	if err != nil || len(dry.Released) != 1 || dry.Released[0].ID != ids[1] || len(dry.Already) != 1 {
		t.Fatalf("dry run = %+v, %v; want %s would be released, %s already", dry, err, ids[1], ids[0])
	}

	src := settle.Stream(b.r.Client, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1"), settle.Reclaim(time.Hour))
	rec, stop := b.start(t, src, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	evs := rec.WaitFor(t, waitBound, "the released entry settled", func(evs []settle.Settled) bool { return len(evs) >= 1 })
	stop()
	if evs[0].ID != ids[0] || evs[0].Attempt != 1 || !evs[0].Final() {
		t.Fatalf("settled %+v, want %s acked on attempt 1", evs[0], ids[0])
	}
	if got := rec.Events(); len(got) != 1 {
		t.Fatalf("settled %d entries, want only the released one (the other is not idle for an hour)", len(got))
	}
	if p := b.pendingIDs(t); len(p["gone"]) != 1 || p["gone"][0] != ids[1] {
		t.Fatalf("pending %v, want %s still at gone", p, ids[1])
	}
}

func TestPruneConsumersRemovesOnlyConsumersHoldingNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 2)
	rdb := b.r.Client
	// "done" takes one entry over and acks it; miniredis counts a consumer's idle time
	// from its claims only.
	if err := rdb.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.in, Group: b.group, Consumer: "done", Messages: []string{ids[1]}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XAck(b.ctx, b.in, b.group, ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(waitBound); ; {
		cs, err := rdb.XInfoConsumers(b.ctx, b.in, b.group).Result()
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(cs, func(c redis.XInfoConsumer) bool { return c.Name == "done" })
		if i >= 0 && cs[i].Idle >= 2*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("done never idle: %+v", cs)
		}
		if b.r.Mini != nil {
			b.r.Mini.SetTime(time.Now().Add(time.Second))
		}
	}

	dry, err := b.insp.PruneConsumers(b.ctx, b.in, b.group, admin.DryRun())
	if err != nil || !dry.DryRun || !slices.Equal(dry.Pruned, []string{"done"}) {
		t.Fatalf("dry run = %+v, %v; want done only", dry, err)
	}
	res, err := b.insp.PruneConsumers(b.ctx, b.in, b.group)
	if err != nil || !slices.Equal(res.Pruned, []string{"done"}) {
		t.Fatalf("PruneConsumers = %+v, %v; want done only", res, err)
	}
	again, err := b.insp.PruneConsumers(b.ctx, b.in, b.group)
	if err != nil || len(again.Pruned) != 0 {
		t.Fatalf("second PruneConsumers = %+v, %v; want nothing", again, err)
	}
	info, err := b.insp.Stream(b.ctx, b.in, b.group)
	if err != nil || len(info.Consumers) != 1 || info.Consumers[0].Name != "gone" || info.Consumers[0].Pending != 1 {
		t.Fatalf("consumers %+v, %v; want gone with its entry", info, err)
	}
	if _, err := b.insp.PruneConsumers(b.ctx, b.in, "nobody"); !errors.Is(err, admin.ErrGroupNotFound) || !contains(err, "nobody") {
		t.Fatalf("PruneConsumers of a missing group = %v, want ErrGroupNotFound naming it", err)
	}
	if _, err := b.insp.PruneConsumers(b.ctx, b.in, b.group, admin.Limit(1)); !contains(err, "Limit(1)") {
		t.Fatalf("PruneConsumers with a Limit = %v, want it refused", err)
	}
}
