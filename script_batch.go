package settle

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxScriptBatch bounds how many script calls share one pipeline.
const maxScriptBatch = 128

// scriptBatcher is a redis.Scripter that sends the EVALSHA calls made at the same time
// by many handlers (retry copies, dead letters, parked delays) in one pipeline. Each
// call is still its own script, atomic on its own, with its own result; they only share
// a round trip, and Redis reads and answers them with one system call instead of one
// each. A call waits for its own result, as it would on the client.
//
// No goroutine outlives the calls: the first call to find the batcher idle starts one
// that sends what is queued, batch after batch, and returns once the queue is empty.
type scriptBatcher struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	queue   []*scriptCall
	running bool
}

var _ redis.Scripter = (*scriptBatcher)(nil)

type scriptCall struct {
	args []any
	cmd  *redis.Cmd
	ctx  context.Context
	done chan struct{}
	keys []string
	sha  string
}

// EvalSha queues the call and waits for its result. redis.Script.Run falls back to Eval
// on NOSCRIPT, which goes to Redis directly (and loads the script for the next calls).
func (b *scriptBatcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c := &scriptCall{args: args, ctx: ctx, done: make(chan struct{}), keys: keys, sha: sha}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if !b.running {
		b.running = true
		go b.flush()
	}
	b.mu.Unlock()
	<-c.done
	return c.cmd
}

// flush sends the queued calls, at most maxScriptBatch per pipeline, until none is left.
func (b *scriptBatcher) flush() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxScriptBatch)
		if n == 0 {
			b.queue = nil
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := make([]*scriptCall, n)
		copy(batch, b.queue)
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.send(batch)
	}
}

// send runs one batch: alone, as a plain EVALSHA; else in one pipeline, under the first
// call's context (every caller passes a settlement context of the same bound). A
// pipeline that fails sets its error on every call in it.
func (b *scriptBatcher) send(batch []*scriptCall) {
	if len(batch) == 1 {
		c := batch[0]
		c.cmd = b.rdb.EvalSha(c.ctx, c.sha, c.keys, c.args...)
		close(c.done)
		return
	}
	ctx := batch[0].ctx
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		c.cmd = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // every call's own error is on its cmd
	for _, c := range batch {
		close(c.done)
	}
}

// Eval implements redis.Scripter: straight to Redis.
func (b *scriptBatcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.rdb.Eval(ctx, script, keys, args...)
}

// EvalRO implements redis.Scripter: straight to Redis.
func (b *scriptBatcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.rdb.EvalRO(ctx, script, keys, args...)
}

// EvalShaRO implements redis.Scripter: straight to Redis.
func (b *scriptBatcher) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return b.rdb.EvalShaRO(ctx, sha, keys, args...)
}

// ScriptExists implements redis.Scripter: straight to Redis.
func (b *scriptBatcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.rdb.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter: straight to Redis.
func (b *scriptBatcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.rdb.ScriptLoad(ctx, script)
}
