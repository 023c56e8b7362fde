package redisstream

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// countEvalSha counts the stream_move script's EVALSHA calls and holds the first one
// until release is closed (the claimer's scripts pass untouched).
type countEvalSha struct {
	calls   atomic.Int64
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

// streamMoveSHA is the SHA1 EVALSHA sends for the stream_move script.
var streamMoveSHA = func() string {
	sum := sha1.Sum([]byte(script.Sources()["stream_move"]))
	return hex.EncodeToString(sum[:])
}()

func (h *countEvalSha) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countEvalSha) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") && fmt.Sprint(cmd.Args()[1]) == streamMoveSHA {
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

// A batch of moves keeps each entry in flight (an own-pending re-read must not deliver
// it again) until its script call has answered, writes each move on its own (a copy of
// an entry another consumer took fails alone) and forgets every entry once answered.
func TestStreamMovesKeepEntriesInFlightUntilWrittenAndAnswerEachOnItsOwn(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key, dlq := r.Key("in"), r.Key("dlq")
	h := &countEvalSha{entered: make(chan struct{}), release: make(chan struct{})}
	tr := openTestStream(t, r.Hooked(t, h), key, source.Policy{DeadLetter: dlq, Delay: delayed.InProcess{}})
	got := publishAndFetch(t, r.Client, tr, "a", "b", "c")
	taken := got[2].ID // another consumer took it over: its copy alone must fail
	if err := r.Client.XClaim(ctx, &redis.XClaimArgs{Stream: key, Group: "g", Consumer: "other", Messages: []string{taken}}).Err(); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{wire.HeaderRetryCount: "1"}
	moves := []source.Move{
		{Action: source.ActionCopy, Delivery: got[0], Headers: headers},
		{Action: source.ActionDeadLetter, Delivery: got[1], Dest: dlq, Headers: headers},
		{Action: source.ActionCopy, Delivery: got[2], Headers: headers},
	}
	answered := make(chan []error, 1)
	go func() { answered <- tr.Moves(ctx, moves) }()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the moves' script was never called")
	}
	tr.mu.Lock()
	inflight := len(tr.inflight)
	tr.mu.Unlock()
	if inflight != 3 {
		t.Fatalf("%d entries in flight while their moves were being written, want 3", inflight)
	}
	close(h.release)
	var errs []error
	select {
	case errs = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("Moves did not return")
	}
	if len(errs) != 3 || errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], script.ErrNotOwner) {
		t.Fatalf("errors %v, want the copy and the dead letter applied and the taken entry's copy refused (not owner)", errs)
	}
	if calls := h.calls.Load(); calls != 2 {
		t.Fatalf("%d script calls, want 2: one per destination", calls)
	}
	tr.mu.Lock()
	inflight = len(tr.inflight)
	tr.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("%d entries still in flight after their moves were answered", inflight)
	}
	if n, err := r.Client.XLen(ctx, dlq).Result(); err != nil || n != 1 {
		t.Fatalf("dead letters = %d, %v; want 1", n, err)
	}
	if n, err := r.Client.XLen(ctx, key).Result(); err != nil || n != 4 {
		t.Fatalf("stream length %d, %v; want the 3 originals and 1 copy", n, err)
	}
	p, err := r.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].ID != taken || p[0].Consumer != "other" {
		t.Fatalf("pending = %+v, %v; want only the entry the other consumer took", p, err)
	}
}
