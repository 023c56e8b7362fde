package settle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
)

// holdFirstEvalSha holds the first EVALSHA sent alone until release is closed, and
// records how many EVALSHA calls each pipeline sent.
type holdFirstEvalSha struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once

	mu        sync.Mutex
	pipelines []int
}

func (h *holdFirstEvalSha) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdFirstEvalSha) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "evalsha") {
			h.once.Do(func() {
				close(h.entered)
				<-h.release
			})
		}
		return next(ctx, cmd)
	}
}

func (h *holdFirstEvalSha) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "evalsha") {
				n++
			}
		}
		if n > 0 { // not the connection's own HELLO pipeline
			h.mu.Lock()
			h.pipelines = append(h.pipelines, n)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

var incrScript = redis.NewScript("return redis.call('INCR', KEYS[1])")

// runHeld runs one call of incrScript on keys[0] alone, holds it in flight, queues the
// calls on the other keys meanwhile, then releases them all. It returns each call's
// result or error, in keys' order, and the sizes of the pipelines sent.
func runHeld(t *testing.T, r *redistest.Redis, keys []string) ([]*redis.Cmd, []int) {
	t.Helper()
	rdb := redis.NewClient(r.Client.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	h := &holdFirstEvalSha{entered: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	ctx := context.Background()
	if err := incrScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	b := &scriptBatcher{rdb: rdb}
	cmds := make([]*redis.Cmd, len(keys))
	var wg sync.WaitGroup
	wg.Go(func() { cmds[0] = b.EvalSha(ctx, incrScript.Hash(), keys[:1]) })
	<-h.entered
	for i := 1; i < len(keys); i++ {
		wg.Go(func() { cmds[i] = b.EvalSha(ctx, incrScript.Hash(), keys[i:i+1]) })
	}
	// Wait for the queue to fill: the calls only append to it and block.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued == len(keys)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, len(keys)-1)
		}
		runtime.Gosched()
	}
	close(h.release)
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return cmds, slices.Clone(h.pipelines)
}

func TestScriptBatcherSendsTheCallsQueuedMeanwhileInOnePipeline(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	keys := make([]string, 21)
	for i := range keys {
		keys[i] = r.Key("counter")
	}
	cmds, pipelines := runHeld(t, r, keys)
	if want := []int{20}; !slices.Equal(pipelines, want) {
		t.Fatalf("pipelines of sizes %v, want %v (the first call alone, the 20 queued behind it together)", pipelines, want)
	}
	var got []int64
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got = append(got, n)
	}
	slices.Sort(got)
	for i, n := range got {
		if n != int64(i+1) {
			t.Fatalf("results %v, want each of 1..21 once: every call ran once, with its own result", got)
		}
	}
}

func TestScriptBatcherGivesEachCallItsOwnError(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	if err := r.Client.Set(context.Background(), r.Key("string"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cmds, pipelines := runHeld(t, r, []string{r.Key("a"), r.Key("b"), r.Key("string"), r.Key("c")})
	if want := []int{3}; !slices.Equal(pipelines, want) {
		t.Fatalf("pipelines of sizes %v, want %v", pipelines, want)
	}
	for i, c := range cmds {
		n, err := c.Int64()
		if i == 2 {
			if err == nil {
				t.Fatalf("call on the string key = %d, want an error", n)
			}
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("call %d = %d, %v; want 1 (a failing call in the same pipeline does not touch the others)", i, n, err)
		}
	}
}

func TestScriptBatcherLoadsAScriptRedisDoesNotKnow(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	s := redis.NewScript("-- " + hex.EncodeToString(nonce[:]) + "\nreturn ARGV[1]")
	b := &scriptBatcher{rdb: r.Client}
	got, err := s.Run(context.Background(), b, []string{r.Key("k")}, "hello").Text()
	if err != nil || got != "hello" {
		t.Fatalf("Run through the batcher = %q, %v; want hello (EVALSHA answers NOSCRIPT, then EVAL)", got, err)
	}
}
