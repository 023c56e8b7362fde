package redisstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
)

// openTestClaiming opens a claiming stream transport on key as consumer c1, on the real
// clock.
func openTestClaiming(t *testing.T, client *redis.Client, key string, minIdle time.Duration) *claimTransport {
	t.Helper()
	return openTestClaimingAs(t, client, key, "c1", minIdle, 50*time.Millisecond)
}

// openTestClaimingAs opens a claiming stream transport on key as consumer, reading with
// block, on the real clock.
func openTestClaimingAs(t *testing.T, client *redis.Client, key, consumer string, minIdle, block time.Duration) *claimTransport {
	t.Helper()
	return redistest.OpenTransport[*claimTransport](t, func(env source.Env) source.Transport {
		return NewClaiming(env, Config{Batch: 100, Block: block, Client: client, Consumer: consumer, Group: "g", Key: key, StartID: "0", TrimKeep: time.Hour}, minIdle, nil)
	}, source.Policy{})
}

// claimScripts records the touch and claim script calls a client makes, told apart by
// their arguments: a claim's fourth (after the key) is min-idle, a number; its fifth the
// cursor, "" when it claims listed ids.
type claimScripts struct {
	mu      sync.Mutex
	touches [][]string // the ids of each touch
	cursors []string   // the cursor of each claim
}

func (h *claimScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *claimScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *claimScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		// An EVALSHA of a script not loaded yet is sent again as an EVAL: count that one.
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 7 && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			h.mu.Lock()
			if _, isClaim := args[6].(int64); isClaim {
				h.cursors = append(h.cursors, args[7].(string))
			} else {
				var ids []string
				for _, a := range args[6:] {
					ids = append(ids, a.(string))
				}
				h.touches = append(h.touches, ids)
			}
			h.mu.Unlock()
		}
		return err
	}
}

func TestClaimingStreamLeavesABatchOfRetriesInOneTouch(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	tr := openTestClaiming(t, r.Client, r.Key("in"), time.Hour)
	ds := publishAndFetch(t, r.Client, tr.streamTransport, "a", "b", "c")
	h := &claimScripts{}
	r.Client.AddHook(h)

	ms := make([]source.Move, len(ds))
	for i, d := range ds {
		ms[i] = source.Move{Action: source.ActionLeave, Delivery: d}
	}
	for i, err := range tr.Moves(context.Background(), ms) {
		if err != nil {
			t.Fatalf("leave of %s: %v", ds[i].ID, err)
		}
	}
	if len(h.touches) != 1 || len(h.touches[0]) != 3 {
		t.Fatalf("touch script calls %v, want one for the 3 entries", h.touches)
	}
	for _, d := range ds {
		p, err := r.Client.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: tr.cfg.Key, Group: "g", Start: d.ID, End: d.ID, Count: 1}).Result()
		if err != nil || len(p) != 1 || p[0].Consumer != "c1" || p[0].RetryCount != 1 {
			t.Fatalf("%s after the leave: pending %+v, %v; want pending at c1, delivered once", d.ID, p, err)
		}
	}
	if ids := tr.inflightIDs(); len(ids) != 0 {
		t.Fatalf("in flight after the leave: %v, want none", ids)
	}
	tr.claim.mu.Lock()
	defer tr.claim.mu.Unlock()
	if len(tr.claim.dues) != 1 || len(tr.claim.dues[0].ids) != 3 {
		t.Fatalf("dues %+v, want one batch of the 3 entries", tr.claim.dues)
	}
}

func TestClaimingStreamClaimsItsOwnDueRetriesByTheirIDsWithoutAScan(t *testing.T) {
	t.Parallel()
	const minIdle = 20 * time.Millisecond
	r := redistest.New(t)
	tr := openTestClaiming(t, r.Client, r.Key("in"), minIdle)
	ds := publishAndFetch(t, r.Client, tr.streamTransport, "a", "b", "c")
	ms := make([]source.Move, len(ds))
	for i, d := range ds {
		ms[i] = source.Move{Action: source.ActionLeave, Delivery: d}
	}
	left := time.Now()
	for _, err := range tr.Moves(context.Background(), ms) {
		if err != nil {
			t.Fatal(err)
		}
	}
	h := &claimScripts{}
	r.Client.AddHook(h)

	var got []*source.Delivery
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(ds); {
		tr.claim.mu.Lock()
		tr.claim.nextScan = time.Now().Add(time.Hour) // no scan of the group is due
		tr.claim.mu.Unlock()
		more, err := tr.Fetch(context.Background(), 10, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
		if time.Now().After(deadline) {
			t.Fatalf("claimed back %d of the %d left entries", len(got), len(ds))
		}
	}
	if since := time.Since(left); since < minIdle {
		t.Fatalf("claimed back %s after the leave, before min-idle %s", since, minIdle)
	}
	for i, d := range got {
		if d.ID != ds[i].ID || d.Attempt != 2 {
			t.Fatalf("claimed %s at attempt %d, want %s at attempt 2", d.ID, d.Attempt, ds[i].ID)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.cursors) == 0 || slices.ContainsFunc(h.cursors, func(c string) bool { return c != "" }) {
		t.Fatalf("claim calls with cursors %q, want only claims of listed ids (cursor \"\")", h.cursors)
	}
}

// A claim that finds the stream's group deleted makes it again and ends its scan (the
// new group has no pending entries) instead of scanning on from the old cursor.
func TestClaimMakesADeletedGroupAgainAndEndsItsScan(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	tr := openTestClaiming(t, r.Client, r.Key("in"), time.Hour)
	ctx := context.Background()
	if err := r.Client.Del(ctx, tr.cfg.Key).Err(); err != nil {
		t.Fatal(err)
	}
	tr.claim.mu.Lock()
	tr.claim.cursor = "5-0" // a scan under way
	tr.claim.mu.Unlock()
	h := &claimScripts{}
	r.Client.AddHook(h)
	ds, err := tr.claim.fetch(ctx, 10)
	if err != nil || len(ds) != 0 {
		t.Fatalf("fetch = %d deliveries, %v; want none and no error", len(ds), err)
	}
	h.mu.Lock()
	cursors := slices.Clone(h.cursors)
	h.mu.Unlock()
	if len(cursors) != 1 {
		t.Fatalf("claim calls from cursors %q, want the one that met NOGROUP only", cursors)
	}
	if groups, err := r.Client.XInfoGroups(ctx, tr.cfg.Key).Result(); err != nil || len(groups) != 1 || groups[0].Name != "g" {
		t.Fatalf("groups %+v, %v; want g made again", groups, err)
	}
	tr.claim.mu.Lock()
	defer tr.claim.mu.Unlock()
	if tr.claim.cursor != "0-0" {
		t.Fatalf("cursor %q after the group was made again, want 0-0", tr.claim.cursor)
	}
}

// One consumer of a group starts a scan of its pending list per poll: another consumer
// that finds a pass started within poll does not scan the same entries again.
func TestClaimScanIsStartedByOneConsumerOfTheGroupPerPoll(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	// poll: the shorter of min-idle/2 and the read's block, 10s: the test is over long before.
	c1 := openTestClaimingAs(t, r.Client, key, "c1", time.Hour, 10*time.Second)
	c2 := openTestClaimingAs(t, r.Client, key, "c2", time.Hour, 10*time.Second)
	ctx := context.Background()
	h := &claimScripts{}
	r.Client.AddHook(h)

	for _, c := range []*claimTransport{c1, c2} {
		if ds, err := c.claim.fetch(ctx, 10); err != nil || len(ds) != 0 {
			t.Fatalf("%s: fetch = %d deliveries, %v; want none", c.consumer, len(ds), err)
		}
	}
	h.mu.Lock()
	cursors := slices.Clone(h.cursors)
	h.mu.Unlock()
	if len(cursors) != 1 || cursors[0] != "0-0" {
		t.Fatalf("claim calls from cursors %q, want one pass (c1's) from 0-0", cursors)
	}
	gate := keys.Derived(key, "claim-scan:g")
	if who, err := r.Client.HGet(ctx, gate, "by").Result(); err != nil || who != "c1" {
		t.Fatalf("scan key %s names %q, %v; want c1, who started the pass", gate, who, err)
	}
	if ttl, err := r.Client.PTTL(ctx, gate).Result(); err != nil || ttl <= 0 || ttl > 20*time.Second {
		t.Fatalf("scan key expires in %s, %v; want within two polls (20s)", ttl, err)
	}
	c2.claim.mu.Lock()
	defer c2.claim.mu.Unlock()
	if !c2.claim.nextScan.After(time.Now()) {
		t.Fatal("c2 will scan at its next read: want it to wait poll")
	}
}

// A claimer warns of an entry taken over from under a running handler once, not at each
// heartbeat while the handler runs on, and again only for an entry taken over anew.
func TestClaimerWarnsOfATakenOverEntryOncePerOccurrence(t *testing.T) {
	t.Parallel()
	var c claimer
	if got := c.newlyTaken([]string{"1-0", "2-0"}, []string{"1-0"}); !slices.Equal(got, []string{"1-0"}) {
		t.Fatalf("first heartbeat warns of %v, want [1-0]", got)
	}
	for range 3 {
		if got := c.newlyTaken([]string{"1-0", "2-0"}, []string{"1-0"}); len(got) != 0 {
			t.Fatalf("a later heartbeat warns of %v again, want nothing new", got)
		}
	}
	if got := c.newlyTaken([]string{"1-0", "2-0"}, []string{"1-0", "2-0"}); !slices.Equal(got, []string{"2-0"}) {
		t.Fatalf("warns of %v, want only the entry newly taken over", got)
	}
	// 1-0 settled (no longer in flight): were it delivered and taken over again, that is
	// a new occurrence.
	c.newlyTaken([]string{"2-0"}, nil)
	if got := c.newlyTaken([]string{"1-0"}, []string{"1-0"}); !slices.Equal(got, []string{"1-0"}) {
		t.Fatalf("warns of %v, want 1-0's new occurrence", got)
	}
}
