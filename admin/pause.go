package admin

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/keys"
)

// ControlKey is the key whose existence pauses the mounts reading key (and group: a
// stream's consumer group, "" for a list), in key's cluster slot:
// "{orders}:paused:workers" for the stream "orders" and its group "workers",
// "{jobs}:paused" for the list "jobs", "{refunds}:in:paused:refunds" for the tagged
// "{refunds}:in". The mounts and this package name it the same way.
func ControlKey(key, group string) string { return keys.Paused(key, group) }

// Pause pauses, from outside their processes, the mounts reading key: a stream's
// consumer group (Stream and ClaimingStream mounts of group), or a list (List and
// ReliableList mounts; group ""). It sets the control key (see ControlKey); each mount
// sees it within a second, then reads nothing new, and finishes and settles what it
// holds (heartbeats and leases go on; a graceful stop still works). Pausing twice is
// pausing once, and nothing else changes.
//
// A paused mount neither reads nor sweeps: copies parked in a durable delay set stay
// there until the resume, and a set with a TTL expires TTL after its last park, so a
// pause longer than that TTL loses them. Give such a set a TTL longer than any pause
// (or none).
//
// A stream needs its group, and the group must exist; a list takes no group. A key
// that does not exist is taken for an empty list (its mounts pause all the same), unless
// it is a Pub/Sub channel with subscribers here: a subscriber cannot be paused (Redis
// keeps nothing for it, so a pause would lose what is published meanwhile), and Pause
// says so. A key of another type is an error wrapping ErrWrongType. Nothing is written
// when Pause refuses.
func (i *Inspector) Pause(ctx context.Context, key, group string) error {
	if err := i.pausable(ctx, key, group); err != nil {
		return err
	}
	control := keys.Paused(key, group)
	if err := i.rdb.Set(ctx, control, "1", 0).Err(); err != nil {
		return fmt.Errorf("admin: pause %s: set %q: %w", what(key, group), control, err)
	}
	return nil
}

// Resume resumes the mounts Pause paused: it deletes the control key. Each mount reads
// again within a second. Resuming what is not paused changes nothing, and the key
// itself need not exist (a list drained while paused).
func (i *Inspector) Resume(ctx context.Context, key, group string) error {
	control := keys.Paused(key, group)
	if err := i.rdb.Del(ctx, control).Err(); err != nil {
		return fmt.Errorf("admin: resume %s: del %q: %w", what(key, group), control, err)
	}
	return nil
}

// Paused reports whether the mounts reading key (and group) are paused: whether the
// control key exists, one EXISTS, as each mount checks it.
func (i *Inspector) Paused(ctx context.Context, key, group string) (bool, error) {
	control := keys.Paused(key, group)
	n, err := i.rdb.Exists(ctx, control).Result()
	if err != nil {
		return false, fmt.Errorf("admin: is %s paused: exists %q: %w", what(key, group), control, err)
	}
	return n > 0, nil
}

// pausable returns why key (and group) cannot be paused, or nil.
func (i *Inspector) pausable(ctx context.Context, key, group string) error {
	if key == "" {
		return fmt.Errorf("admin: pause: the key is empty")
	}
	typ, err := i.rdb.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("admin: pause %q: type: %w", key, err)
	}
	switch typ {
	case "stream":
		if group == "" {
			return fmt.Errorf("admin: pause stream %q: name the consumer group to pause (a stream is paused per group)", key)
		}
		groups, err := i.rdb.XInfoGroups(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("admin: pause stream %q: xinfo groups: %w", key, err)
		}
		for _, g := range groups {
			if g.Name == group {
				return nil
			}
		}
		return fmt.Errorf("%w: stream %q has no group %q", ErrGroupNotFound, key, group)
	case "list":
		if group != "" {
			return fmt.Errorf("admin: pause list %q: a list has no consumer groups; give no group (got %q)", key, group)
		}
		return nil
	case "none":
		if group != "" {
			return fmt.Errorf("%w: stream %q does not exist (a stream's group is paused once the stream and its group exist)", ErrKeyNotFound, key)
		}
		subs, err := i.rdb.PubSubNumSub(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("admin: pause %q: pubsub numsub: %w", key, err)
		}
		if n := subs[key]; n > 0 {
			return fmt.Errorf("%w: %q is a Pub/Sub channel with %d subscriber(s), not a key: a subscriber cannot be paused (Redis keeps nothing for it, so what is published meanwhile would be lost); stop its App instead", ErrWrongType, key, n)
		}
		return nil // an empty (or not yet written) list
	}
	return fmt.Errorf("%w: %q holds a %s: only a stream's consumer group or a list can be paused", ErrWrongType, key, typ)
}

// what names key and group for an error.
func what(key, group string) string {
	if group == "" {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("stream %q group %q", key, group)
}
