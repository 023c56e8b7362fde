package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// StreamInfo is a stream and one of its consumer groups, as Inspector.Stream sees them.
type StreamInfo struct {
	// Consumers are the group's consumers, by name.
	Consumers []ConsumerInfo
	// Dead names the consumers that hold pending entries and have been idle longer than
	// ReclaimIdle: their process probably died, and a Stream mount's reclaim takes their
	// entries over.
	Dead []string
	// EntriesAdded is how many entries were ever added to the stream (XINFO STREAM
	// entries-added; 0 where the server does not say): its change over time is the rate
	// producers write at.
	EntriesAdded int64
	// EntriesRead is how many entries the group has read (XINFO GROUPS entries-read; 0
	// where the server does not say).
	EntriesRead int64
	// Group is the consumer group.
	Group string
	// Key is the stream's key.
	Key string
	// Lag is how many entries the group has still to read, or -1 where Redis cannot tell
	// (after deletions or trims, on servers before 7.0).
	Lag int64
	// LastDeliveredID is the id of the last entry the group was delivered.
	LastDeliveredID string
	// Length is the stream's length (XLEN).
	Length int64
	// OldestPendingAge is how long ago the oldest pending entry was added (from its id
	// and the server's clock); 0 when nothing is pending.
	OldestPendingAge time.Duration
	// OldestPendingDeliveries is how many times the oldest pending entry was delivered.
	OldestPendingDeliveries int64
	// OldestPendingID is the id of the oldest (lowest id) pending entry, "" when nothing
	// is pending.
	OldestPendingID string
	// OldestPendingIdle is how long the oldest pending entry has gone without being
	// delivered, claimed or touched by a heartbeat; 0 when nothing is pending.
	OldestPendingIdle time.Duration
	// Paused reports that the group's mounts are paused: its control key exists (see
	// Inspector.Pause).
	Paused bool
	// Pending is how many entries were delivered to the group and not acknowledged.
	Pending int64
	// ReclaimIdle is the idle past which a consumer holding entries counts as dead.
	ReclaimIdle time.Duration
}

// ConsumerInfo is one consumer of a group.
type ConsumerInfo struct {
	// Dead reports that the consumer holds pending entries and has been idle longer than
	// StreamInfo.ReclaimIdle.
	Dead bool
	// Idle is how long since the consumer last read, claimed or acknowledged (XINFO
	// CONSUMERS idle); negative where the server does not know.
	Idle time.Duration
	// Name is the consumer's name.
	Name string
	// Pending is how many entries are pending to it.
	Pending int64
}

// StreamOption configures Inspector.Stream.
type StreamOption interface {
	applyStream(*streamConfig)
}

type streamConfig struct {
	reclaimIdle time.Duration
}

type streamOptionFunc func(*streamConfig)

func (f streamOptionFunc) applyStream(c *streamConfig) { f(c) }

// ReclaimIdle sets the idle past which a consumer holding pending entries counts as
// dead: give the mount's settle.Reclaim. Defaults to settle.DefaultReclaim.
func ReclaimIdle(d time.Duration) StreamOption {
	return streamOptionFunc(func(c *streamConfig) { c.reclaimIdle = d })
}

// Stream returns the stream key and its consumer group, read with XLEN, XINFO STREAM,
// XINFO GROUPS, XPENDING, XINFO CONSUMERS and EXISTS of its control key (not one
// snapshot: each figure is as of its own command). A missing key, a key that is not a
// stream, or a group the stream does not have is an error naming it.
func (i *Inspector) Stream(ctx context.Context, key, group string, opts ...StreamOption) (*StreamInfo, error) {
	cfg := streamConfig{reclaimIdle: settle.DefaultReclaim}
	for _, o := range opts {
		if o != nil {
			o.applyStream(&cfg)
		}
	}
	if err := i.mustBe(ctx, key, "stream", "stream", false); err != nil {
		return nil, err
	}
	info := &StreamInfo{Group: group, Key: key, ReclaimIdle: cfg.reclaimIdle}
	var err error
	if info.Length, err = i.rdb.XLen(ctx, key).Result(); err != nil {
		return nil, fmt.Errorf("admin: stream %q: xlen: %w", key, err)
	}
	xs, err := i.rdb.XInfoStream(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q: xinfo stream: %w", key, err)
	}
	info.EntriesAdded = xs.EntriesAdded
	groups, err := i.rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q: xinfo groups: %w", key, err)
	}
	found := false
	for _, g := range groups {
		if g.Name == group {
			found = true
			info.EntriesRead, info.Lag, info.LastDeliveredID = g.EntriesRead, g.Lag, g.LastDeliveredID
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: stream %q has no group %q", ErrGroupNotFound, key, group)
	}
	if err := i.oldestPending(ctx, info); err != nil {
		return nil, err
	}
	if info.Paused, err = i.Paused(ctx, key, group); err != nil {
		return nil, err
	}
	consumers, err := i.rdb.XInfoConsumers(ctx, key, group).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: stream %q group %q: xinfo consumers: %w", key, group, err)
	}
	for _, c := range consumers {
		ci := ConsumerInfo{Idle: c.Idle, Name: c.Name, Pending: c.Pending}
		ci.Dead = c.Pending > 0 && c.Idle > cfg.reclaimIdle
		if ci.Dead {
			info.Dead = append(info.Dead, c.Name)
		}
		info.Consumers = append(info.Consumers, ci)
	}
	return info, nil
}

// oldestPending fills in the pending count and the oldest pending entry.
func (i *Inspector) oldestPending(ctx context.Context, info *StreamInfo) error {
	p, err := i.rdb.XPending(ctx, info.Key, info.Group).Result()
	if err != nil {
		return fmt.Errorf("admin: stream %q group %q: xpending: %w", info.Key, info.Group, err)
	}
	info.Pending = p.Count
	if p.Count == 0 {
		return nil
	}
	ext, err := i.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: info.Key, Group: info.Group, Start: p.Lower, End: p.Lower, Count: 1}).Result()
	if err != nil {
		return fmt.Errorf("admin: stream %q group %q: xpending %s: %w", info.Key, info.Group, p.Lower, err)
	}
	info.OldestPendingID = p.Lower
	if len(ext) == 1 {
		info.OldestPendingIdle, info.OldestPendingDeliveries = ext[0].Idle, ext[0].RetryCount
	}
	now, err := i.now(ctx)
	if err != nil {
		return err
	}
	if at := IDTime(p.Lower); !at.IsZero() && now.After(at) {
		info.OldestPendingAge = now.Sub(at)
	}
	return nil
}
