package redisstream

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
)

// readCount counts the XREADGROUP commands a client sends.
type readCount struct{ n atomic.Int64 }

func (h *readCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *readCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "xreadgroup") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestAClaimScanThatFindsNothingPendingWaitsUntilAnEntryCouldBeIdleEnough: a pass over
// a group with nothing pending at all comes again only once an entry read after it could
// be idle enough to claim (min-idle, at most ten polls), not every poll: an idle Stream
// mount sent a claim and a scan-gate script a second. With one entry pending (at another
// consumer, not idle enough yet) the next pass comes a poll later, as before.
func TestAClaimScanThatFindsNothingPendingWaitsUntilAnEntryCouldBeIdleEnough(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	const block = time.Second // poll: the shorter of min-idle/2 and the block
	c1 := openTestClaimingAs(t, r.Client, key, "c1", time.Minute, block)
	ctx := context.Background()

	start := time.Now()
	if ds, err := c1.claim.fetch(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("fetch = %d deliveries, %v; want none", len(ds), err)
	}
	c1.claim.mu.Lock()
	next := c1.claim.nextScan
	c1.claim.mu.Unlock()
	if wait := next.Sub(start); wait < 9*block {
		t.Fatalf("after a pass over an empty group the next comes in %s; want ten polls (%s)", wait, 10*block)
	}

	// An entry pending at another consumer, not idle enough: the next pass a poll later.
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []string{"p", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "other", Streams: []string{key, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	c2 := openTestClaimingAs(t, r.Client, key, "c2", time.Minute, block)
	if err := r.Client.Del(ctx, c2.claim.s.gateKey()).Err(); err != nil { // c1's pass just now
		t.Fatal(err)
	}
	start = time.Now()
	if ds, err := c2.claim.fetch(ctx, 10); err != nil || len(ds) != 0 {
		t.Fatalf("fetch = %d deliveries, %v; want none (the entry is not idle enough)", len(ds), err)
	}
	c2.claim.mu.Lock()
	next = c2.claim.nextScan
	c2.claim.mu.Unlock()
	if wait := next.Sub(start); wait > 2*block {
		t.Fatalf("with an entry pending the next pass comes in %s; want a poll (%s)", wait, block)
	}
}

// TestAnIdleStreamReadsOncePerClaimPoll: a read bounded by the next claim scan wakes a
// server tick early; the scan then comes at once instead of after a second, short read
// (an idle Stream mount sent two XREADGROUPs a second).
func TestAnIdleStreamReadsOncePerClaimPoll(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	ctx := context.Background()
	// Something pending keeps the scans a poll apart (see the test above).
	if err := r.Client.XGroupCreateMkStream(ctx, key, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []string{"p", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "other", Streams: []string{key, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	reads := &readCount{}
	const block = 300 * time.Millisecond
	c := openTestClaimingAs(t, r.Hooked(t, reads), key, "c1", time.Hour, block)
	c.rescan = false // no own pending entries to re-read
	const window = 10 * block
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		if ds, err := c.Fetch(ctx, 10, block); err != nil || len(ds) != 0 {
			t.Fatalf("Fetch = %d deliveries, %v; want none", len(ds), err)
		}
	}
	if n := reads.n.Load(); n > int64(window/block)+2 {
		t.Fatalf("%d XREADGROUPs in %s with a poll of %s; want one a poll", n, window, block)
	}
}
