package redislist

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/source"
)

// commandCount is a go-redis hook that counts the commands sent, by name.
type commandCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCount) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.n[strings.ToLower(cmd.Name())]++
	}
}

func (c *commandCount) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.add(cmd); return next(ctx, cmd) }
}

func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.add(cmds...); return next(ctx, cmds) }
}

// TestAnIdleReliableListsKeeperRoundDoesNotWakeItself: a recovery round that finds
// nothing to take leaves no wake behind; one did, and an idle list's keeper ran rounds
// back to back (14,000 SMEMBERS a second, 60 % of a core).
func TestAnIdleReliableListsKeeperRoundDoesNotWakeItself(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	tr := openTestReliableList(t, r.Client, r.Key("in"), source.Policy{})
	tr.keeper.recover(context.Background())
	select {
	case <-tr.lot.wake:
		t.Fatal("an idle recovery round woke the keeper for another")
	default:
	}
	if _, more := tr.takeoverPending(); more {
		t.Fatal("an idle recovery round says it left items behind")
	}
}

// TestAnIdleReliableListBlocksInRedisWithoutABatchTake: once a Fetch found the list
// empty, the next ones block in Redis at once (one BLMOVE each), instead of first
// calling the list_take script, which would find nothing; an item pushed meanwhile
// comes back through the BLMOVE.
func TestAnIdleReliableListBlocksInRedisWithoutABatchTake(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	count := &commandCount{n: map[string]int{}}
	key := r.Key("in")
	tr := openTestReliableList(t, r.Hooked(t, count), key, source.Policy{})
	ctx := context.Background()
	if _, err := tr.Fetch(ctx, 10, 20*time.Millisecond); err != nil { // finds the list empty
		t.Fatal(err)
	}
	count.take()
	for range 2 {
		if ds, err := tr.Fetch(ctx, 10, 20*time.Millisecond); err != nil || len(ds) != 0 {
			t.Fatalf("Fetch = %d, %v; want nothing", len(ds), err)
		}
	}
	if got := count.take(); got["evalsha"]+got["eval"]+got["lmove"] != 0 || got["blmove"] != 2 {
		t.Fatalf("two idle Fetches sent %v; want 2 BLMOVE and no take (no script, no LMOVE)", got)
	}
	if err := r.Client.RPush(ctx, key, "a", "b", "c").Err(); err != nil {
		t.Fatal(err)
	}
	if ds := redistest.FetchN(t, tr, 3); len(ds) != 3 {
		t.Fatalf("fetched %d, want the 3 pushed", len(ds))
	}
}

// TestADrainedReliableListStillReadsWhileDelaysKeepItsWaitsShort: a Fetch whose wait is
// too short to block in Redis (a delay due within a second shortens it) still takes an
// item pushed meanwhile, though the last Fetch found the list empty (and so skips its
// batch take): a short wait used to only wait on the client, and the item stayed
// unread as long as waits stayed short.
func TestADrainedReliableListStillReadsWhileDelaysKeepItsWaitsShort(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	key := r.Key("in")
	tr := openTestReliableList(t, r.Client, key, source.Policy{})
	ctx := context.Background()
	if ds, err := tr.Fetch(ctx, 10, 20*time.Millisecond); err != nil || len(ds) != 0 { // finds the list empty
		t.Fatalf("Fetch = %d, %v; want nothing", len(ds), err)
	}
	if err := r.Client.RPush(ctx, key, "a").Err(); err != nil {
		t.Fatal(err)
	}
	// Called with a sub-second wait, as the engine does when a delay comes due soon
	// (Fetch itself rounds the mount's Block up to whole seconds).
	v, err := blockingPop(ctx, r.Client, key, tr.processing, 300*time.Millisecond)
	if err != nil || v != "a" {
		t.Fatalf("a short blocking pop = %q, %v; want the pushed item", v, err)
	}
}
