// Package script holds settle's Lua scripts, one .lua file each, embedded at build time
// and wrapped once with redis.NewScript (EVALSHA, falling back to EVAL). Go encodes
// every value a script writes; the scripts only move bytes between keys, all of them
// given in KEYS.
package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// SweepBatch is the most members one sweep call moves; callers loop while a full batch
// moved.
const SweepBatch = 100

// The preludes: functions that several scripts share, prepended to each script that
// uses them (its header names them) when it is loaded.
var (
	//go:embed now.lua
	nowSrc string // nowMs: ARGV "now" or the server's TIME
	//go:embed next_due.lua
	nextDueSrc string // nextDue: a delay set's earliest due time
	//go:embed acl.lua
	aclSrc string // refused, refusedAny: the user's permissions, checked before a write
	//go:embed expiry.lua
	expirySrc string // keepFor: a delay set's expiry, which only grows
)

var (
	//go:embed park.lua
	parkSrc string
	//go:embed sweep.lua
	sweepSrc string

	park  = redis.NewScript(aclSrc + nowSrc + expirySrc + parkSrc)
	sweep = redis.NewScript(aclSrc + nowSrc + nextDueSrc + sweepSrc)
)

// nowArg is the optional "now" argument: empty lets the script use the server's TIME.
func nowArg(now int64) string {
	if now < 0 {
		return ""
	}
	return strconv.FormatInt(now, 10)
}

// Park adds member to the delay set scored by now + delay (ms) and acknowledges entry id
// of stream in group, in one script; the set then lives at least ttl after this park
// (ttl 0: for ever), its expiry never brought closer (expiry.lua).
// now is the time in ms since the epoch, or -1 for the server's TIME. It returns the
// due time in ms.
func Park(ctx context.Context, rdb redis.Scripter, set, stream, group, consumer, id, member string, delay, ttl time.Duration, now int64) (int64, error) {
	ttlMs := ttl.Milliseconds()
	if ttl > 0 && ttlMs == 0 {
		ttlMs = 1
	}
	due, err := park.Run(ctx, rdb, []string{set, stream},
		member, delay.Milliseconds(), ttlMs, group, id, nowArg(now), consumer).Int64()
	if err != nil {
		return 0, fmt.Errorf("park script: %w", notOwner(err))
	}
	return due, nil
}

// SweepResult is one sweep call's answer.
type SweepResult struct {
	// Moved counts the members moved into the stream.
	Moved int
	// Next is the earliest due time (ms) still in the set, or -1 when it is empty.
	Next int64
	// Now is the time (ms) the sweep compared against.
	Now int64
	// Unheard counts the members published to a channel that no subscriber received
	// (SweepChannel only).
	Unheard int
}

// Sweep moves up to limit members of the delay set due at now (ms since the epoch, or -1
// for the server's TIME) into stream with new ids, in one script. payloadField names the
// field a member that does not parse is written back under.
func Sweep(ctx context.Context, rdb redis.Scripter, set, stream string, now int64, limit int, payloadField string) (SweepResult, error) {
	vals, err := sweep.Run(ctx, rdb, []string{set, stream}, nowArg(now), limit, payloadField).Int64Slice()
	if err != nil {
		return SweepResult{}, fmt.Errorf("sweep script: %w", err)
	}
	if len(vals) != 3 {
		return SweepResult{}, fmt.Errorf("sweep script: %d values returned, want 3", len(vals))
	}
	return SweepResult{Moved: int(vals[0]), Next: vals[1], Now: vals[2]}, nil
}

// Sources returns the source of every script this package runs, as Redis is sent it
// (its preludes included), by the name of its .lua file: for tests that load the
// scripts or tell their EVALSHA calls apart by SHA1.
func Sources() map[string]string {
	return map[string]string{
		"channel_sweep":      aclSrc + nowSrc + nextDueSrc + channelSweepSrc,
		"claim":              aclSrc + pendingAtSrc + claimSrc,
		"dedup_seen":         nowSrc + dedupSeenSrc,
		"delay_promote":      aclSrc + nowSrc + delayPromoteSrc,
		"delay_publish":      aclSrc + nowSrc + expirySrc + delayPublishSrc,
		"idempotent_publish": aclSrc + idempotentPublishSrc,
		"keep_attempt":       aclSrc + keepAttemptSrc,
		"lease":              nowSrc + leaseSrc,
		"limit_release":      limitReleaseSrc,
		"limit_renew":        nowSrc + limitRenewSrc,
		"limit_take":         limitTakeSrc,
		"limit_waiting":      nowSrc + limitWaitingSrc,
		"list_done":          aclSrc + nowSrc + expirySrc + dedupSrc + listDoneSrc,
		"list_move":          aclSrc + listMoveSrc,
		"list_recover":       aclSrc + listRecoverSrc,
		"list_replay":        aclSrc + listReplaySrc,
		"list_reply":         aclSrc + nowSrc + expirySrc + dedupSrc + listReplySrc,
		"list_sweep":         aclSrc + nowSrc + nextDueSrc + listSweepSrc,
		"list_take":          aclSrc + listTakeSrc,
		"member_beat":        nowSrc + memberBeatSrc,
		"park":               aclSrc + nowSrc + expirySrc + parkSrc,
		"partition_meta":     partitionMetaSrc,
		"pending_dead":       aclSrc + pendingDeadSrc,
		"pending_release":    aclSrc + pendingAtSrc + pendingReleaseSrc,
		"perms":              permsSrc,
		"prune":              pruneSrc,
		"release":            aclSrc + pendingAtSrc + releaseSrc,
		"replay":             aclSrc + replaySrc,
		"scan_gate":          nowSrc + scanGateSrc,
		"stream_done":        aclSrc + nowSrc + expirySrc + dedupSrc + streamDoneSrc,
		"stream_move":        aclSrc + streamMoveSrc,
		"stream_reply":       aclSrc + nowSrc + expirySrc + dedupSrc + streamReplySrc,
		"sweep":              aclSrc + nowSrc + nextDueSrc + sweepSrc,
		"touch":              aclSrc + pendingAtSrc + touchSrc,
		"trim":               nowSrc + trimSrc,
		"value_park":         aclSrc + nowSrc + expirySrc + valueParkSrc,
	}
}

// Processor runs a command: every go-redis client (Client, ClusterClient, Ring, the
// failover clients) is one.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceScript is a script that go-redis must never send twice (see run).
type onceScript struct {
	*redis.Script
	src string
}

func newOnceScript(src string) onceScript { return onceScript{Script: redis.NewScript(src), src: src} }

// run runs the script as Script.Run does (EVALSHA, then EVAL when the server does not
// know it), but never sends a call again after a connection failure: a call whose reply
// was lost may have run, and its caller must learn that.
func (s onceScript) run(ctx context.Context, rdb Processor, keys []string, args ...any) *redis.Cmd {
	cmd := evalCmd(ctx, "evalsha", s.Hash(), keys, args)
	_ = rdb.Process(ctx, cmdOnce{cmd})
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = evalCmd(ctx, "eval", s.src, keys, args)
		_ = rdb.Process(ctx, cmdOnce{cmd})
	}
	return cmd
}

// cmdOnce is a script call that go-redis must not send twice.
type cmdOnce struct{ *redis.Cmd }

// NoRetry keeps go-redis from sending the call again after a connection failure.
func (cmdOnce) NoRetry() bool { return true }

// evalCmd builds an EVAL or EVALSHA (name) of script (its source or its hash).
func evalCmd(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}
