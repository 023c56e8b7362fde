package redisbase

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// WaitReplicas runs WAIT n timeout on key's server, after a write of its own there (a
// short-lived marker key in key's slot): WAIT counts the replicas that have the writes
// of its own connection, and that write, made after the settlements the caller saw
// applied, comes after them in the replication stream.
func WaitReplicas(ctx context.Context, rdb redis.UniversalClient, key string, n int, timeout time.Duration) (int, error) {
	var c redis.Cmdable = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, err
		}
		c = node // WAIT names no key: it must go to the node the marker was written on
	}
	var wait *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, replicaMarker(key), "1", time.Minute)
		wait = p.Do(ctx, "wait", n, timeout.Milliseconds()) // not in Pipeliner's method set
		return nil
	})
	if err != nil {
		return 0, err
	}
	got, err := wait.Int()
	return got, err
}

// replicaMarker is the key waitReplicas writes before its WAIT, in key's slot.
func replicaMarker(key string) string { return keys.Derived(key, "replicas") }

// CheckReplicaPerms checks that rdb's user may run WaitReplicas's commands for key.
func CheckReplicaPerms(ctx context.Context, rdb redis.UniversalClient, key string) error {
	return CheckPerms(ctx, rdb, []Perm{{"SET", replicaMarker(key), "1", "PX", "60000"}, {"WAIT", "1", "100"}})
}
