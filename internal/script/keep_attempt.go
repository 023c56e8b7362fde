package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed keep_attempt.lua
var keepAttemptSrc string

var keepAttempt = redis.NewScript(aclSrc + keepAttemptSrc)

// KeepAttempt sets the delivery count of entry id, pending to consumer in stream's
// group, to count (see keep_attempt.lua): the attempts an Ordered retry spent in place,
// so that a re-read after a crash or a stop counts on from them. It returns ErrNotOwner
// when the entry is not pending to consumer: nothing was changed.
func KeepAttempt(ctx context.Context, rdb redis.Scripter, stream, group, consumer, id string, count int) error {
	if err := keepAttempt.Run(ctx, rdb, []string{stream}, group, consumer, id, count).Err(); err != nil {
		return fmt.Errorf("keep attempt script: %w", notOwner(err))
	}
	return nil
}
