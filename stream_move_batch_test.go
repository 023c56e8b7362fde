package settle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// countEvalSha counts EVALSHA calls and holds the first one until release is closed.
type countEvalSha struct {
	calls   atomic.Int64
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (h *countEvalSha) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countEvalSha) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			h.calls.Add(1)
			h.once.Do(func() {
				close(h.entered)
				<-h.release
			})
		}
		return next(ctx, cmd)
	}
}

func (h *countEvalSha) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestMoveBatcherSendsTheMovesQueuedMeanwhileInOneScriptCallPerDestinationEachAnsweredOnItsOwn(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	stream, dlq := r.Key("in"), r.Key("dlq")
	if err := r.Client.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 12
	ids := make([]string, n)
	for i := range ids {
		id, err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", "x"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	if err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: n, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	taken := ids[5] // another consumer took it over: its move alone must fail
	if err := r.Client.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: "g", Consumer: "other", Messages: []string{taken}}).Err(); err != nil {
		t.Fatal(err)
	}

	rdb := redis.NewClient(r.Client.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	// Load the script first, so that every call below is one EVALSHA.
	if err := script.StreamMove(ctx, rdb, stream, stream, "g", "c", "0-1", 0, []any{"payload", "x"}); !errors.Is(err, script.ErrNotOwner) {
		t.Fatalf("loading move = %v, want ErrNotOwner", err)
	}
	h := &countEvalSha{entered: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	b := &moveBatcher{consumer: "c", group: "g", rdb: rdb, stream: stream}

	// The first move goes alone and is held; the others queue meanwhile: copies back to
	// the stream, and the last two to the dead-letter stream.
	errs := make([]error, n)
	dest := func(i int) (string, int64) {
		if i >= n-2 {
			return dlq, 100
		}
		return stream, 0
	}
	var wg sync.WaitGroup
	move := func(i int) {
		key, maxLen := dest(i)
		errs[i] = b.move(ctx, key, maxLen, ids[i], []any{"payload", "copy"})
	}
	wg.Go(func() { move(0) })
	<-h.entered
	for i := 1; i < n; i++ {
		wg.Go(func() { move(i) })
	}
	waitQueued(t, &b.batcher, n-1)
	close(h.release)
	wg.Wait()

	if got := h.calls.Load(); got != 3 {
		t.Fatalf("%d script calls, want 3: the first move alone, then one per destination", got)
	}
	for i, err := range errs {
		if ids[i] == taken {
			if !errors.Is(err, script.ErrNotOwner) {
				t.Fatalf("move of the entry another consumer took = %v, want ErrNotOwner", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
	}
	if got, err := r.Client.XLen(ctx, dlq).Result(); err != nil || got != 2 {
		t.Fatalf("dead letters = %d, %v; want 2", got, err)
	}
	if got, err := r.Client.XLen(ctx, stream).Result(); err != nil || got != n+n-3 {
		t.Fatalf("stream length %d, %v; want the %d originals and %d copies", got, err, n, n-3)
	}
	p, err := r.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 100}).Result()
	if err != nil || len(p) != 1 || p[0].ID != taken || p[0].Consumer != "other" {
		t.Fatalf("pending = %+v, %v; want only the entry the other consumer took", p, err)
	}
}
