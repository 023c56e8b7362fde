package script

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every script is sent to Redis as Sources gives it: its SHA1 is what EVALSHA sends.
func TestSourcesAreWhatRedisIsSent(t *testing.T) {
	t.Parallel()

	scripts := map[string]*redis.Script{
		"channel_sweep":      channelSweep,
		"claim":              claim,
		"dedup_seen":         dedupSeen,
		"delay_promote":      delayPromote,
		"delay_publish":      delayPublish,
		"idempotent_publish": idempotentPublish.Script,
		"keep_attempt":       keepAttempt,
		"lease":              lease,
		"limit_release":      limitRelease,
		"limit_renew":        limitRenew,
		"limit_take":         limitTake,
		"limit_waiting":      limitWaiting,
		"list_done":          listDone,
		"list_move":          listMove,
		"list_recover":       ListRecover,
		"list_replay":        listReplay,
		"list_reply":         listReply,
		"list_sweep":         listSweep,
		"list_take":          listTake.Script,
		"member_beat":        memberBeat,
		"park":               park,
		"partition_meta":     partitionMeta,
		"pending_dead":       pendingDead,
		"pending_release":    pendingRelease,
		"perms":              perms,
		"prune":              prune,
		"release":            release,
		"replay":             replay,
		"scan_gate":          scanGate,
		"stream_done":        streamDone,
		"stream_move":        streamMove,
		"stream_reply":       streamReply,
		"sweep":              sweep,
		"touch":              touch,
		"trim":               trim,
		"value_park":         valuePark,
	}
	srcs := Sources()
	if len(srcs) != len(scripts) {
		t.Fatalf("Sources has %d scripts, want %d", len(srcs), len(scripts))
	}
	for name, s := range scripts {
		sum := sha1.Sum([]byte(srcs[name]))
		if got, want := hex.EncodeToString(sum[:]), s.Hash(); got != want {
			t.Fatalf("SHA1 of Sources()[%q] = %s, want the script's %s", name, got, want)
		}
	}
}
