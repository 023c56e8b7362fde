package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// PartitionedStreamInfo is a partitioned stream's group as Inspector.PartitionedStream
// reads it: its layout, its live members and each partition's owner and backlog.
type PartitionedStreamInfo struct {
	// Group is the consumer group read.
	Group string
	// Hash names the hash that routes a key to its partition (see settle.PartitionFor).
	Hash string
	// Members are the group's members whose heartbeat has not run out, in name order.
	Members []PartitionMember
	// Name is the partitioned stream's name (its meta key).
	Name string
	// Partitions is each partition, by index.
	Partitions []PartitionInfo
}

// PartitionMember is one live member of a partitioned stream's group.
type PartitionMember struct {
	// Name is the member's consumer name.
	Name string
	// Owns is how many partitions it holds a live lease on.
	Owns int
	// TTL is how long until its heartbeat runs out unless renewed.
	TTL time.Duration
}

// PartitionInfo is one partition of a partitioned stream, for one group.
type PartitionInfo struct {
	// DeadLetters is how many entries the partition's dead-letter stream holds (0 when
	// no dead letter was named, or it does not exist).
	DeadLetters int64
	// Index is the partition's index.
	Index int
	// Key is the partition's stream key.
	Key string
	// Lag is how many entries the group has not read yet (-1 where the server cannot
	// say, as after an XDEL or a trim past unread entries).
	Lag int64
	// LeaseLeft is how long the owner's lease lasts unless renewed (0: no live lease).
	LeaseLeft time.Duration
	// Length is the partition stream's length.
	Length int64
	// Owner is the member holding a live lease on the partition ("" for none: the
	// partition waits for a member to take it).
	Owner string
	// Pending is how many of its entries were delivered to the group and not settled.
	Pending int64
	// Token is the fencing token of the partition's latest holder.
	Token string
}

// PartitionOption configures Inspector.PartitionedStream.
type PartitionOption interface {
	applyPartition(*partitionConfig)
}

type partitionConfig struct {
	deadLetter string
}

type partitionOptionFunc func(*partitionConfig)

func (f partitionOptionFunc) applyPartition(c *partitionConfig) { f(c) }

// PartitionDeadLetter names the mount's dead-letter destination (the name given to
// settle.DeadLetter): each partition's dead letters are counted in its own copy of it.
func PartitionDeadLetter(dest string) PartitionOption {
	return partitionOptionFunc(func(c *partitionConfig) { c.deadLetter = dest })
}

// PartitionedStream returns the partitioned stream name's group: its layout (from its
// meta key), its live members, and each partition's lease (owner, token, time left by
// the Redis server's clock), length, lag, pending count and, with PartitionDeadLetter,
// dead letters. Its reads are pipelined, one round per node on a cluster, and are not
// one snapshot. A name that is not a partitioned stream's meta key is an error naming
// it; a partition that has no such group yet shows its length only.
func (i *Inspector) PartitionedStream(ctx context.Context, name, group string, opts ...PartitionOption) (*PartitionedStreamInfo, error) {
	var cfg partitionConfig
	for _, o := range opts {
		if o != nil {
			o.applyPartition(&cfg)
		}
	}
	if err := keys.CheckPartitionName(name); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if err := i.mustBe(ctx, name, "hash", "partitioned stream", false); err != nil {
		return nil, err
	}
	meta, err := i.rdb.HGetAll(ctx, name).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: partitioned stream %q: hgetall: %w", name, err)
	}
	n, err := strconv.Atoi(meta["partitions"])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%w: %q is a hash without a partition count: not a partitioned stream's meta key", ErrWrongType, name)
	}
	now, err := i.now(ctx)
	if err != nil {
		return nil, err
	}
	info := &PartitionedStreamInfo{Group: group, Hash: meta["hash"], Name: name}
	members, err := i.rdb.ZRangeByScoreWithScores(ctx, keys.PartitionMembers(name, group), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: partitioned stream %q: members: %w", name, err)
	}
	for _, m := range members {
		info.Members = append(info.Members, PartitionMember{Name: fmt.Sprint(m.Member), TTL: time.Duration(int64(m.Score)-now.UnixMilli()) * time.Millisecond})
	}
	type reads struct {
		lease  *redis.SliceCmd
		length *redis.IntCmd
		groups *redis.XInfoGroupsCmd
		dead   *redis.IntCmd
	}
	rs := make([]reads, n)
	_, err = i.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range n {
			key := keys.Partition(name, k)
			rs[k].lease = p.HMGet(ctx, keys.PartitionLease(name, k, group), "owner", "token", "until")
			rs[k].length = p.XLen(ctx, key)
			rs[k].groups = p.XInfoGroups(ctx, key)
			if cfg.deadLetter != "" {
				rs[k].dead = p.XLen(ctx, keys.InPartition(name, k, cfg.deadLetter))
			}
		}
		return nil
	})
	_ = err // each command's own error is checked below
	owns := map[string]int{}
	for k, r := range rs {
		cmds := []redis.Cmder{r.lease, r.length, r.groups}
		if r.dead != nil {
			cmds = append(cmds, r.dead)
		}
		for _, c := range cmds {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !noSuchKey(err) {
				return nil, fmt.Errorf("admin: partitioned stream %q partition %d: %s: %w", name, k, fmt.Sprintf("%v %v", c.Args()[0], c.Args()[1]), err)
			}
		}
		pi := PartitionInfo{Index: k, Key: keys.Partition(name, k), Lag: -1}
		if v, err := r.lease.Result(); err == nil {
			owner, _ := v[0].(string)
			pi.Token, _ = v[1].(string)
			until, _ := v[2].(string)
			ms, _ := strconv.ParseInt(until, 10, 64)
			if left := time.Duration(ms-now.UnixMilli()) * time.Millisecond; owner != "" && left > 0 {
				pi.Owner, pi.LeaseLeft = owner, left
				owns[owner]++
			}
		}
		pi.Length, _ = r.length.Result()
		if gs, err := r.groups.Result(); err == nil {
			for _, g := range gs {
				if g.Name == group {
					pi.Lag, pi.Pending = g.Lag, g.Pending
				}
			}
		}
		if r.dead != nil {
			pi.DeadLetters, _ = r.dead.Result()
		}
		info.Partitions = append(info.Partitions, pi)
	}
	for k := range info.Members {
		info.Members[k].Owns = owns[info.Members[k].Name]
	}
	return info, nil
}

// noSuchKey reports the error of XINFO GROUPS on a partition stream not made yet.
func noSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}
