package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed list_reply.lua
var listReplySrc string

var listReply = redis.NewScript(aclSrc + nowSrc + expirySrc + dedupSrc + listReplySrc)

// ListReply takes item out of a reliable list consumer's processing list and pushes
// replies (values encoded by the caller) to the tail of the list dest, in one script
// (see list_reply.lua): all or nothing, and only if the item was still there (else
// ErrItemGone, nothing written). With marks (settle.Dedupe; nil: none), the item's
// dedup key (marks.Keys[0]) is marked completed in the same step.
func ListReply(ctx context.Context, rdb redis.Scripter, processing, dest, item string, replies [][]byte, marks *Marks) error {
	keys := []string{processing, dest}
	args := make([]any, 0, 4+len(replies))
	args = append(args, item)
	if marks != nil {
		keys = append(keys, marks.Set)
		args = append(args, nowArg(marks.Now), windowMs(marks.Window), marks.Keys[0])
	}
	for _, r := range replies {
		args = append(args, r)
	}
	n, err := listReply.Run(ctx, rdb, keys, args...).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("list reply script: %w", err)
	case n == 0:
		return ErrItemGone
	case n != 1:
		return fmt.Errorf("list reply script: unexpected reply %d", n)
	}
	return nil
}
