package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed list_reply.lua
var listReplySrc string

var listReply = redis.NewScript(aclSrc + listReplySrc)

// ListReply takes item out of a reliable list consumer's processing list and pushes
// replies (values encoded by the caller) to the tail of the list dest, in one script
// (see list_reply.lua): all or nothing, and only if the item was still there (else
// ErrItemGone, nothing written).
func ListReply(ctx context.Context, rdb redis.Scripter, processing, dest, item string, replies [][]byte) error {
	args := make([]any, 0, 1+len(replies))
	args = append(args, item)
	for _, r := range replies {
		args = append(args, r)
	}
	n, err := listReply.Run(ctx, rdb, []string{processing, dest}, args...).Int64()
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
