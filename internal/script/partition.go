package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed partition_meta.lua
	partitionMetaSrc string
	//go:embed member_beat.lua
	memberBeatSrc string
	//go:embed lease.lua
	leaseSrc string

	partitionMeta = redis.NewScript(partitionMetaSrc)
	memberBeat    = redis.NewScript(nowSrc + memberBeatSrc)
	lease         = redis.NewScript(nowSrc + leaseSrc)
)

// PartitionMeta records n partitions and the hash in the meta key of a partitioned
// stream when it has none, or replaces the partitions recorded when they still are from
// (from > 0; the caller checked their layout holds nothing), and returns the partitions
// and hash recorded after the call (see partition_meta.lua).
func PartitionMeta(ctx context.Context, rdb redis.Scripter, meta string, n int, hash string, from int) (int, string, error) {
	replace := ""
	if from > 0 {
		replace = strconv.Itoa(from)
	}
	vals, err := partitionMeta.Run(ctx, rdb, []string{meta}, n, hash, replace).StringSlice()
	if err != nil {
		return 0, "", fmt.Errorf("partition meta script: %w", err)
	}
	got, err := strconv.Atoi(vals[0])
	if err != nil || len(vals) < 2 {
		return 0, "", fmt.Errorf("partition meta script: %q holds partitions %q, not a number", meta, vals[0])
	}
	return got, vals[1], nil
}

// MemberBeat renews member's heartbeat in the members set for ttl (or removes it,
// leaving) and returns the live members in name order (see member_beat.lua). now is in
// ms since the epoch, or -1 for the server's TIME.
func MemberBeat(ctx context.Context, rdb redis.Scripter, members, member string, ttl time.Duration, now int64, leave bool) ([]string, error) {
	l := ""
	if leave {
		l = "1"
	}
	live, err := memberBeat.Run(ctx, rdb, []string{members}, member, max(ttl.Milliseconds(), 1), nowArg(now), l).StringSlice()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("member beat script: %w", err)
	}
	return live, nil
}

// LeaseState is what a lease call found or did.
type LeaseState int

// The lease states.
const (
	// LeaseOther: another member holds the lease; Token names it.
	LeaseOther LeaseState = iota
	// LeaseHeld: the member held it with its token (renewed, or handed back by a drop).
	LeaseHeld
	// LeaseTaken: the member took it, under a new Token.
	LeaseTaken
)

// Lease takes or renews member's lease for ttl (drop false), or hands it back (drop
// true); token is the one member holds ("" for none). It returns the state and the
// token now held, or the owner when LeaseOther (see lease.lua). now is in ms since the
// epoch, or -1 for the server's TIME.
func Lease(ctx context.Context, rdb redis.Scripter, key, member, token string, ttl time.Duration, now int64, drop bool) (LeaseState, string, error) {
	mode := "take"
	if drop {
		mode = "drop"
	}
	res, err := lease.Run(ctx, rdb, []string{key}, member, token, max(ttl.Milliseconds(), 1), nowArg(now), mode).Slice()
	if err != nil {
		return 0, "", fmt.Errorf("lease script: %w", err)
	}
	if len(res) != 2 {
		return 0, "", fmt.Errorf("lease script: answered %v", res)
	}
	st, _ := res[0].(int64)
	s, _ := res[1].(string)
	return LeaseState(st), s, nil
}
