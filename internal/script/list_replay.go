package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed list_replay.lua
var listReplaySrc string

var listReplay = redis.NewScript(aclSrc + listReplaySrc)

// ListReplay removes member from the dead-letter list dlq and appends value to the list
// dest, in one script (see list_replay.lua). It returns moved false when member is no
// longer in dlq: nothing was written.
func ListReplay(ctx context.Context, rdb redis.Scripter, dest, dlq, member string, value []byte) (moved bool, err error) {
	err = listReplay.Run(ctx, rdb, []string{dest, dlq}, member, value).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("list replay script: %w", err)
	}
	return true, nil
}
