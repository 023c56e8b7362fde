package redisbase

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// ConnectedReplicas returns how many replicas key's primary reports connected (INFO
// replication: connected_slaves).
func ConnectedReplicas(ctx context.Context, rdb redis.UniversalClient, key string) (int, error) {
	var c redis.Cmdable = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, err
		}
		c = node
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO replication has no connected_slaves")
}

// replicaMarker is the key waitReplicas writes before its WAIT, in key's slot.
func replicaMarker(key string) string { return keys.Derived(key, "replicas") }

// CheckReplicaPerms checks that rdb's user may run WaitReplicas's commands for key.
func CheckReplicaPerms(ctx context.Context, rdb redis.UniversalClient, key string) error {
	return CheckPerms(ctx, rdb, []Perm{{"SET", replicaMarker(key), "1", "PX", "60000"}, {"WAIT", "1", "100"}})
}
