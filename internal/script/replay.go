package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed replay.lua
var replaySrc string

var replay = redis.NewScript(aclSrc + replaySrc)

// Replay appends an entry (values: field/value pairs, encoded by the caller) to the
// stream dest and deletes entry id of the dead-letter stream dlq, in one script (see
// replay.lua). It returns the new entry's id, or moved false when id is no longer in
// dlq: nothing was written.
func Replay(ctx context.Context, rdb redis.Scripter, dest, dlq, id string, values []any) (newID string, moved bool, err error) {
	args := make([]any, 0, 1+len(values))
	args = append(args, id)
	args = append(args, values...)
	newID, err = replay.Run(ctx, rdb, []string{dest, dlq}, args...).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("replay script: %w", err)
	}
	return newID, true, nil
}
