package redisbase

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/source"
)

// KeyType is a key a mount writes besides its source, and the Redis type it must hold
// when it exists.
type KeyType struct {
	// Role names the key as the user declared it ("dead-letter stream", "delay set").
	Role string
	// Key is the key; an empty one is not checked.
	Key string
	// Type is what TYPE must answer: "stream", "list" or "zset".
	Type string
}

// writeCommand is the command a settlement writes a key of each type with.
var writeCommand = map[string]string{"list": "RPUSH", "stream": "XADD", "zset": "ZADD"}

// MountKeyTypes is the mount's delay set (when durable) and its dead-letter and reply
// destinations (when declared and kind, "stream" or "list", is what they hold; a
// pub/sub mount's are channels, not keys: pass kind "").
func MountKeyTypes(p source.Policy, kind string) []KeyType {
	var ks []KeyType
	if d, ok := DelaySetOf(source.Env{Policy: p}); ok {
		ks = append(ks, KeyType{Role: "delay set (DurableZset.Key)", Key: d.Key, Type: "zset"})
	}
	if kind != "" {
		ks = append(ks, KeyType{Role: "dead-letter " + kind + " (DeadLetter)", Key: p.DeadLetter, Type: kind},
			KeyType{Role: "reply " + kind + " (ReplyTo)", Key: p.ReplyTo, Type: kind})
	}
	return ks
}

// CheckKeyTypes reads the type of each key (one pipeline) and returns an error naming
// every key that exists and holds another type: a mount refused at Run, not one that
// starts and then fails each settlement that writes there. An error of the read itself
// is returned as it is.
func CheckKeyTypes(ctx context.Context, rdb redis.UniversalClient, ks []KeyType) error {
	var want []KeyType
	for _, k := range ks {
		if k.Key != "" {
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return nil
	}
	cmds := make([]*redis.StatusCmd, len(want))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range want {
			cmds[i] = p.Type(ctx, k.Key)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read the types of the keys the mount writes: %w", err)
	}
	var errs []error
	for i, k := range want {
		if got := cmds[i].Val(); got != "none" && got != k.Type {
			errs = append(errs, fmt.Errorf("the %s %q holds a %s, not a %s: the settlements' %s there fails (WRONGTYPE)", k.Role, k.Key, got, k.Type, writeCommand[k.Type]))
		}
	}
	return errors.Join(errs...)
}
