package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed stream_reply.lua
var streamReplySrc string

var streamReply = redis.NewScript(aclSrc + streamReplySrc)

// StreamReply appends replies (each its field/value pairs, encoded by the caller) to the
// stream dest and acknowledges entry id of stream in group, in one script: all or
// nothing (see stream_reply.lua), and only while the entry is still pending to consumer
// (else ErrNotOwner, nothing written).
func StreamReply(ctx context.Context, rdb redis.Scripter, dest, stream, group, consumer, id string, replies [][]any) error {
	n := 3
	for _, r := range replies {
		n += 1 + len(r)
	}
	args := make([]any, 0, n)
	args = append(args, group, consumer, id)
	for _, r := range replies {
		args = append(args, len(r))
		args = append(args, r...)
	}
	if err := streamReply.Run(ctx, rdb, []string{dest, stream}, args...).Err(); err != nil {
		return fmt.Errorf("stream reply script: %w", notOwner(err))
	}
	return nil
}
