package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
)

// stuck publishes n payments and has consumer "gone" of the group read them and die:
// they stay pending at it. It returns their ids.
func (b *testBundle) stuck(t *testing.T, n int) []string {
	t.Helper()
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(b.rdb)
	var ids []string
	for k := range n {
		id, err := pub.Publish(b.ctx, b.in, payment{Card: "4242", ID: k + 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "gone", Streams: []string{b.in, ">"}, Count: int64(n), Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func (b *testBundle) pendingCount(t *testing.T) int64 {
	t.Helper()
	p, err := b.rdb.XPending(b.ctx, b.in, b.group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

type pendingActionOut struct {
	Already      []string `json:"already"`
	DeadLettered []struct {
		Consumer string `json:"consumer"`
		DeadID   string `json:"dead_id"`
		ID       string `json:"id"`
	} `json:"dead_lettered"`
	DryRun   bool `json:"dry_run"`
	Released []struct {
		ID string `json:"id"`
	} `json:"released"`
}

func TestPendingDeadAndReleaseActOnceAndRefuseWhatIsNotPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 3)

	b.fails(t, exitError, []string{"not a terminal", "--yes"}, "pending", "dead", b.in, b.group, ids[0], "--to", b.dlq)
	var dry pendingActionOut
	decode(t, b.ok(t, nil, "pending", "dead", b.in, b.group, ids[0], "--to", b.dlq, "--dry-run", "--json").stdout, &dry)
	if !dry.DryRun || len(dry.DeadLettered) != 1 || dry.DeadLettered[0].Consumer != "gone" || dry.DeadLettered[0].DeadID != "" {
		t.Fatalf("dry run %+v, want %s of gone selected, nothing written", dry, ids[0])
	}
	if n, _ := b.rdb.Exists(b.ctx, b.dlq).Result(); n != 0 || b.pendingCount(t) != 3 {
		t.Fatal("the dry run changed something")
	}

	var dead pendingActionOut
	decode(t, b.ok(t, nil, "pending", "dead", b.in, b.group, ids[0], "--to", b.dlq, "--yes", "--json").stdout, &dead)
	if len(dead.DeadLettered) != 1 || dead.DeadLettered[0].DeadID == "" {
		t.Fatalf("pending dead %+v, want %s dead-lettered", dead, ids[0])
	}
	if b.xlen(t, b.dlq) != 1 || b.pendingCount(t) != 2 {
		t.Fatalf("after pending dead: dlq %d, pending %d; want 1 and 2", b.xlen(t, b.dlq), b.pendingCount(t))
	}
	var s lsOut
	decode(t, b.ok(t, nil, "dlq", "ls", b.dlq, "--json").stdout, &s)
	if counts(s.ByReason)["dead-lettered by an operator"] != 1 || counts(s.BySource)[b.in] != 1 {
		t.Fatalf("dlq ls %+v, want one dead letter of %s by an operator", s, b.in)
	}
	b.fails(t, exitError, []string{ids[0], "not pending"}, "pending", "dead", b.in, b.group, ids[0], "--to", b.dlq, "--yes")
	if b.xlen(t, b.dlq) != 1 {
		t.Fatal("the second pending dead wrote another dead letter")
	}

	var rel pendingActionOut
	decode(t, b.ok(t, nil, "pending", "release", b.in, b.group, ids[1], "--yes", "--json").stdout, &rel)
	if len(rel.Released) != 1 || rel.Released[0].ID != ids[1] {
		t.Fatalf("pending release %+v, want %s released", rel, ids[1])
	}
	var again pendingActionOut
	decode(t, b.ok(t, nil, "pending", "release", b.in, b.group, ids[1], "--yes", "--json").stdout, &again)
	if len(again.Released) != 0 || len(again.Already) != 1 {
		t.Fatalf("second pending release %+v, want it released already", again)
	}
	ext, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: b.in, Group: b.group, Start: ids[1], End: ids[1], Count: 1}).Result()
	if err != nil || len(ext) != 1 || ext[0].RetryCount != 0 || ext[0].Idle < time.Hour {
		t.Fatalf("released entry %+v, %v; want its delivery taken off once and idle past any reclaim", ext, err)
	}

	b.fails(t, exitError, []string{`"12"`}, "pending", "release", b.in, b.group, "12", "--yes")
	b.fails(t, exitError, []string{"1-1"}, "pending", "release", b.in, b.group, "1-1", "--yes")
	b.fails(t, exitError, []string{`"nobody"`}, "pending", "dead", b.in, "nobody", ids[2], "--to", b.dlq, "--yes")
	b.fails(t, exitUsage, []string{"--to"}, "pending", "dead", b.in, b.group, ids[2])
	b.fails(t, exitUsage, []string{"ID..."}, "pending", "release", b.in, b.group)
	if b.pendingCount(t) != 2 || b.xlen(t, b.dlq) != 1 {
		t.Fatal("a refused command changed something")
	}
}

func TestConsumersLsShowsThemAndPruneRemovesOnlyThoseHoldingNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 2)
	// "done" takes one entry over and acks it: it holds nothing.
	if err := b.rdb.XClaim(b.ctx, &redis.XClaimArgs{Stream: b.in, Group: b.group, Consumer: "done", Messages: []string{ids[1]}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.XAck(b.ctx, b.in, b.group, ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	type consumer struct {
		Name    string `json:"name"`
		Pending int    `json:"pending"`
		IdleMs  int64  `json:"idle_ms"`
	}
	var cs []consumer
	for deadline := time.Now().Add(waitBound); ; {
		cs = lines[consumer](t, b.ok(t, nil, "consumers", "ls", b.in, b.group, "--json").stdout)
		// Wait until the server counts "done" idle (prune spares a consumer idle under
		// 1 ms); miniredis says -1 for "gone", which only read.
		if len(cs) == 2 && slices.ContainsFunc(cs, func(c consumer) bool { return c.Name == "done" && c.IdleMs >= 2 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers ls %+v, want gone and done, idle a few ms", cs)
		}
	}
	got := map[string]int{}
	for _, c := range cs {
		got[c.Name] = c.Pending
	}
	if len(got) != 2 || got["gone"] != 1 || got["done"] != 0 {
		t.Fatalf("consumers %v, want gone holding 1 and done holding 0", got)
	}

	type pruneOut struct {
		DryRun bool     `json:"dry_run"`
		Pruned []string `json:"pruned"`
	}
	var dry, res, again pruneOut
	decode(t, b.ok(t, nil, "consumers", "prune", b.in, b.group, "--dry-run", "--json").stdout, &dry)
	if !dry.DryRun || len(dry.Pruned) != 1 || dry.Pruned[0] != "done" {
		t.Fatalf("dry run %+v, want done", dry)
	}
	b.fails(t, exitError, []string{"--yes"}, "consumers", "prune", b.in, b.group)
	decode(t, b.ok(t, nil, "consumers", "prune", b.in, b.group, "--yes", "--json").stdout, &res)
	if len(res.Pruned) != 1 || res.Pruned[0] != "done" {
		t.Fatalf("prune %+v, want done", res)
	}
	decode(t, b.ok(t, nil, "consumers", "prune", b.in, b.group, "--yes", "--json").stdout, &again)
	if len(again.Pruned) != 0 {
		t.Fatalf("second prune %+v, want nothing", again)
	}
	if cs := lines[consumer](t, b.ok(t, nil, "consumers", "ls", b.in, b.group, "--json").stdout); len(cs) != 1 || cs[0].Name != "gone" || cs[0].Pending != 1 {
		t.Fatalf("consumers after prune %+v, want gone with its entry", cs)
	}
}

// parked runs a Stream mount with a durable delay set whose handler asks for a retry an
// hour later on the first attempt and acks the second, publishes one payment, and waits
// until its retry copy is parked. acked is closed when the second attempt is handled.
func (b *testBundle) parked(t *testing.T) (set string, handled *atomic.Int32, acked chan struct{}) {
	t.Helper()
	set = b.key("delayed")
	handled = new(atomic.Int32)
	acked = make(chan struct{})
	parked := make(chan struct{}, 1)
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: func(_ context.Context, s settle.Settled) {
		if s.Attempt == 1 {
			parked <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(b.rdb, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1")),
		settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			handled.Add(1)
			if m.Attempt == 1 {
				return settle.RetryAfter(time.Hour, errors.New("provider busy"))
			}
			close(acked)
			return nil
		}), settle.MaxAttempts(3), settle.DelayIn(delayed.DurableZset{Key: set}))
	ctx, cancel := context.WithCancel(b.ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if _, err := settle.NewPublisher(b.rdb).Publish(b.ctx, b.in, payment{Card: "4242", ID: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-parked:
	case <-time.After(waitBound):
		t.Fatalf("the retry was not parked within %s", waitBound)
	}
	return set, handled, acked
}

type delayOut struct {
	Done []struct {
		Handle string `json:"handle"`
	} `json:"done"`
	DryRun bool     `json:"dry_run"`
	Due    []string `json:"due"`
}

func TestDelayedPromoteDeliversTheParkedRetryNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, _, acked := b.parked(t)

	members := lines[struct {
		Due    time.Time `json:"due"`
		Handle string    `json:"handle"`
	}](t, b.ok(t, nil, "delayed", "ls", set, "--members", "--json").stdout)
	if len(members) != 1 || members[0].Due.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("delayed ls --members %+v, want the retry copy, due in an hour", members)
	}
	handle := members[0].Handle
	var dry delayOut
	decode(t, b.ok(t, nil, "delayed", "promote", set, handle, "--dry-run", "--json").stdout, &dry)
	if !dry.DryRun || len(dry.Done) != 1 || dry.Done[0].Handle != handle {
		t.Fatalf("dry run %+v, want %s", dry, handle)
	}
	b.fails(t, exitError, []string{`"1-1"`}, "delayed", "promote", set, "1-1", "--yes")
	var res delayOut
	decode(t, b.ok(t, nil, "delayed", "promote", set, "--all", "--yes", "--json").stdout, &res)
	if len(res.Done) != 1 {
		t.Fatalf("promote --all %+v, want the member promoted", res)
	}
	select {
	case <-acked:
	case <-time.After(waitBound):
		t.Fatalf("the promoted retry was not delivered within %s", waitBound)
	}
	b.fails(t, exitUsage, []string{"--all"}, "delayed", "promote", set)
	b.fails(t, exitUsage, []string{"--all"}, "delayed", "promote", set, handle, "--all")
}

func TestDelayedCancelRemovesTheParkedRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, handled, _ := b.parked(t)
	members := lines[struct {
		Handle string `json:"handle"`
	}](t, b.ok(t, nil, "delayed", "ls", set, "--members", "--json").stdout)
	if len(members) != 1 {
		t.Fatalf("delayed ls --members: %+v", members)
	}
	var dry delayOut
	decode(t, b.ok(t, nil, "delayed", "cancel", set, members[0].Handle, "--dry-run", "--json").stdout, &dry)
	if len(dry.Done) != 1 || b.rdb.ZCard(b.ctx, set).Val() != 1 {
		t.Fatalf("dry run %+v, want it shown and kept", dry)
	}
	b.fails(t, exitError, []string{"--yes"}, "delayed", "cancel", set, members[0].Handle)
	b.ok(t, nil, "delayed", "cancel", set, members[0].Handle, "--yes")
	if n := b.rdb.ZCard(b.ctx, set).Val(); n != 0 {
		t.Fatalf("the set holds %d after cancel, want 0", n)
	}
	b.fails(t, exitError, []string{members[0].Handle, "no member"}, "delayed", "cancel", set, members[0].Handle, "--yes")
	if n := handled.Load(); n != 1 {
		t.Fatalf("handled %d times, want 1", n)
	}
	b.fails(t, exitUsage, []string{"unknown flag"}, "delayed", "cancel", set, "--all")
}

func TestSeekMovesTheGroupToAnIDOrATimeAgo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 3)
	type seekOut struct {
		DryRun bool   `json:"dry_run"`
		From   string `json:"from"`
		To     string `json:"to"`
	}
	var dry seekOut
	decode(t, b.ok(t, nil, "seek", b.in, b.group, "2h", "--dry-run", "--json").stdout, &dry)
	if !dry.DryRun || dry.From != ids[2] || !strings.HasSuffix(dry.To, "-0") {
		t.Fatalf("seek 2h dry run %+v, want from %s to <ms>-0", dry, ids[2])
	}
	b.fails(t, exitError, []string{`"yesterday"`}, "seek", b.in, b.group, "yesterday", "--yes")
	b.fails(t, exitError, []string{`"nobody"`}, "seek", b.in, "nobody", "0", "--yes")
	b.fails(t, exitError, []string{"--yes"}, "seek", b.in, b.group, ids[0])
	b.fails(t, exitUsage, []string{"ID|TIME"}, "seek", b.in, b.group)
	if os.Getenv(EnvRedisURL) == "" {
		t.Skip("miniredis does not implement XGROUP SETID: the seek itself runs on real Redis (SETTLE_REDIS_URL)")
	}
	var res seekOut
	decode(t, b.ok(t, nil, "seek", b.in, b.group, ids[0], "--yes", "--json").stdout, &res)
	if res.DryRun || res.To != ids[0] {
		t.Fatalf("seek %+v, want moved to %s", res, ids[0])
	}
	s, err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "again", Streams: []string{b.in, ">"}, Count: 10, Block: -1}).Result()
	if err != nil || len(s[0].Messages) != 2 || s[0].Messages[0].ID != ids[1] {
		t.Fatalf("after seek the group reads %v, %v; want %v", s, err, ids[1:])
	}
}

// TestPendingLsListsTheEntriesPagedAndReleaseAndDeadTakeConsumerOrAll: pending ls
// --entries pages the entries with their consumer, idle and deliveries; release takes
// --consumer, dead takes --all.
func TestPendingLsListsTheEntriesPagedAndReleaseAndDeadTakeConsumerOrAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 5)
	type pendingRow struct {
		Consumer   string `json:"consumer"`
		Deliveries int64  `json:"deliveries"`
		ID         string `json:"id"`
	}
	page := lines[pendingRow](t, b.ok(t, nil, "pending", "ls", b.in, b.group, "--entries", "--limit", "2", "--after", ids[0], "--json").stdout)
	if len(page) != 2 || page[0].ID != ids[1] || page[1].ID != ids[2] || page[0].Consumer != "gone" || page[0].Deliveries != 1 {
		t.Fatalf("the page after %s: %+v, want %s and %s at consumer gone, delivered once", ids[0], page, ids[1], ids[2])
	}
	if r := b.ok(t, nil, "pending", "ls", b.in, b.group, "--entries", "--consumer", "nobody"); strings.Contains(r.stdout, ids[0]) {
		t.Fatalf("entries of consumer nobody: %s", r.stdout)
	}
	var rel pendingActionOut
	decode(t, b.ok(t, nil, "pending", "release", b.in, b.group, "--consumer", "gone", "--yes", "--json").stdout, &rel)
	if len(rel.Released) != 5 {
		t.Fatalf("release --consumer gone released %d, want 5", len(rel.Released))
	}
	var dead pendingActionOut
	decode(t, b.ok(t, nil, "pending", "dead", b.in, b.group, "--all", "--to", b.dlq, "--yes", "--json").stdout, &dead)
	if len(dead.DeadLettered) != 5 || b.pendingCount(t) != 0 || b.xlen(t, b.dlq) != 5 {
		t.Fatalf("dead --all dead-lettered %d, %d left pending, %d dead letters; want 5, 0, 5", len(dead.DeadLettered), b.pendingCount(t), b.xlen(t, b.dlq))
	}
	b.fails(t, exitUsage, []string{"not both"}, "pending", "release", b.in, b.group, ids[0], "--all", "--yes")
}
