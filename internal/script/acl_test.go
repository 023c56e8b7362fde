package script_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// snapshot returns every key of the private server with its DUMP (a stream's groups
// and pending entries, delivery counts and times included): equal snapshots, nothing
// written.
func snapshot(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	ks, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range ks {
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

// TestEveryScriptRefusedByTheACLWritesNothing: each settlement script whose user may
// not run one of its writes (one that comes after another write) answers NOPERM and
// writes nothing: before the scripts asked first, each of these left the write before
// the refused one (a copy of an entry still pending, an item taken and not pushed, a
// count raised and not given back).
func TestEveryScriptRefusedByTheACLWritesNothing(t *testing.T) {
	t.Parallel()
	r := redistest.Private(t)
	ctx := context.Background()
	stream, dlq, set, proc, list := "{p}:in", "{p}:dlq", "{p}:delayed", "{p}:proc", "{p}:list"
	mustDo := func(args ...any) {
		t.Helper()
		if err := r.Client.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	// One of everything the scripts touch.
	mustDo("XADD", stream, "1-1", "payload", "x")
	mustDo("XGROUP", "CREATE", stream, "g", "0")
	mustDo("XREADGROUP", "GROUP", "g", "b", "STREAMS", stream, ">")
	mustDo("XADD", dlq, "1-1", "payload", "dead")
	mustDo("RPUSH", proc, "item")
	mustDo("RPUSH", "{p}:dlqlist", "member")
	mustDo("SADD", "{p}:consumers", "c")
	mustDo("ZADD", set, "1", "1-1\nvalue", "99999999999999", "1-2\nlater")

	for _, tc := range []struct {
		script string
		deny   string
		run    func(rdb *redis.Client) error
	}{
		{"value_park", "zadd", func(rdb *redis.Client) error {
			_, _, err := script.ParkValue(ctx, rdb, set, proc, "item", "m", 0, 0, -1)
			return err
		}},
		{"list_sweep", "zrem", func(rdb *redis.Client) error {
			_, err := script.SweepList(ctx, rdb, set, list, 10, script.SweepBatch)
			return err
		}},
		{"channel_sweep", "zrem", func(rdb *redis.Client) error {
			_, err := script.SweepChannel(ctx, rdb, set, "{p}:ch", 10, script.SweepBatch)
			return err
		}},
		{"list_recover", "srem", func(rdb *redis.Client) error {
			_, _, err := script.RunListRecover(ctx, rdb, []string{"{p}:hb", proc, list, dlq + "list", "{p}:consumers"}, "0", "c", "item", "list", "item")
			return err
		}},
		{"claim", "xclaim", func(rdb *redis.Client) error {
			_, err := script.Claim(ctx, rdb, stream, "g", "b", 0, "0-0", 10, "1-1") // in flight: its count given back by XCLAIM
			return err
		}},
		{"touch", "xclaim", func(rdb *redis.Client) error { _, err := script.Touch(ctx, rdb, stream, "g", "b", "1-1"); return err }},
		{"release", "xclaim", func(rdb *redis.Client) error { _, err := script.Release(ctx, rdb, stream, "g", "b", "1-1"); return err }},
		{"pending_release", "xclaim", func(rdb *redis.Client) error {
			_, err := script.ReleasePending(ctx, rdb, stream, "g", "b", "1-1")
			return err
		}},
		{"replay", "xdel", func(rdb *redis.Client) error {
			_, _, err := script.Replay(ctx, rdb, stream, dlq, "1-1", []any{"payload", "dead"})
			return err
		}},
		{"list_replay", "rpush", func(rdb *redis.Client) error {
			_, err := script.ListReplay(ctx, rdb, list, "{p}:dlqlist", "member", []byte("member"))
			return err
		}},
		{"pending_dead", "xack", func(rdb *redis.Client) error {
			_, _, err := script.DeadLetterPending(ctx, rdb, stream, dlq, "g", "1-1", []any{"payload", "x"})
			return err
		}},
		{"delay_promote", "zadd", func(rdb *redis.Client) error {
			_, err := script.PromoteDelayed(ctx, rdb, set, 10, "1-2\nlater")
			return err
		}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			user := r.User(t, "settle-"+strings.ReplaceAll(tc.script, "_", "-"), "+@all", "-"+tc.deny)
			before := snapshot(t, r.Client)
			err := tc.run(user)
			if after := snapshot(t, r.Client); !maps.Equal(before, after) {
				t.Fatalf("%s without %s wrote %s (%v)", tc.script, tc.deny, diffKeys(before, after), err)
			}
			if err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Fatalf("%s without %s: %v, want NOPERM", tc.script, tc.deny, err)
			}
		})
	}
}

// diffKeys names the keys whose dump differs.
func diffKeys(a, b map[string]string) string {
	var out []string
	for k := range a {
		if a[k] != b[k] {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k+" (new)")
		}
	}
	return fmt.Sprint(out)
}
