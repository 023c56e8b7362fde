package script

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed dedup.lua
	dedupSrc string // refusedMarks, markDone: settle.Dedupe's completion marks
	//go:embed dedup_seen.lua
	dedupSeenSrc string
	//go:embed stream_done.lua
	streamDoneSrc string

	dedupSeen  = redis.NewScript(nowSrc + dedupSeenSrc)
	streamDone = redis.NewScript(aclSrc + nowSrc + expirySrc + dedupSrc + streamDoneSrc)
)

// Marks says where and for how long the completions of one call mark their dedup keys
// (settle.Dedupe), in the call's own atomic step.
type Marks struct {
	// Keys are the dedup keys, one per item or entry of the call, in order ("" for none).
	Keys []string
	// Now is "now" in ms since the epoch (a test's fake clock), or -1 for the server's
	// TIME.
	Now int64
	// Set is the mark set (keys.Dedup), in the source's hash slot.
	Set string
	// Window is how long a mark lives from its completion.
	Window time.Duration
}

// windowMs is a window in whole ms, at least 1.
func windowMs(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// DedupSeen reports, for each of keys, whether set holds a live completion mark of it (see
// dedup_seen.lua), in one script call that writes nothing. now is "now" in ms since the
// epoch, or -1 for the server's TIME.
func DedupSeen(ctx context.Context, rdb redis.Scripter, set string, now int64, keys []string) ([]bool, error) {
	args := make([]any, 0, 1+len(keys))
	args = append(args, nowArg(now))
	for _, k := range keys {
		args = append(args, k)
	}
	vals, err := dedupSeen.Run(ctx, rdb, []string{set}, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("dedup seen script: %w", err)
	}
	if len(vals) != len(keys) {
		return nil, fmt.Errorf("dedup seen script: %d replies for %d keys", len(vals), len(keys))
	}
	seen := make([]bool, len(keys))
	for i, v := range vals {
		seen[i] = v == 1
	}
	return seen, nil
}

// StreamDone acknowledges entries ids of stream in group and marks (m.Keys, one per id)
// the dedup keys of those it acknowledged, in one script call (see stream_done.lua): an
// entry's mark is written if and only if the call acknowledged it.
func StreamDone(ctx context.Context, rdb redis.Scripter, stream, group string, ids []string, m Marks) error {
	args := make([]any, 0, 3+2*len(ids))
	args = append(args, group, nowArg(m.Now), windowMs(m.Window))
	for i, id := range ids {
		args = append(args, id, m.Keys[i])
	}
	if err := streamDone.Run(ctx, rdb, []string{stream, m.Set}, args...).Err(); err != nil {
		return fmt.Errorf("stream done script: %w", err)
	}
	return nil
}

//go:embed idempotent_publish.lua
var idempotentPublishSrc string

var idempotentPublish = newOnceScript(aclSrc + idempotentPublishSrc)

// IdempotentPublish appends an entry of values (field/value pairs) to stream unless
// mark, its idempotency key's mark, holds the id of an entry published within the window
// (see idempotent_publish.lua), in one script call sent at most once. trim is "",
// "MAXLEN" (approximate, to trimArg entries) or "MINID" (exact, below trimArg). It
// returns the entry's id, the first publish's for a key published already, and whether
// this call wrote it.
func IdempotentPublish(ctx context.Context, rdb Processor, stream, mark string, window time.Duration, trim string, trimArg any, values []any) (string, bool, error) {
	args := make([]any, 0, 3+len(values))
	args = append(args, windowMs(window), trim, trimArg)
	args = append(args, values...)
	vals, err := idempotentPublish.run(ctx, rdb, []string{stream, mark}, args...).Slice()
	if err != nil {
		return "", false, fmt.Errorf("idempotent publish script: %w", err)
	}
	if len(vals) != 2 {
		return "", false, fmt.Errorf("idempotent publish script: %d values returned, want 2", len(vals))
	}
	wrote, _ := vals[0].(int64)
	id, _ := vals[1].(string)
	return id, wrote == 1, nil
}
