package redisbase

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// Paused reports whether the control key of key (and group) exists: one EXISTS.
func Paused(ctx context.Context, rdb redis.UniversalClient, key, group string) (bool, error) {
	n, err := rdb.Exists(ctx, keys.Paused(key, group)).Result()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}
