package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed stream_reply.lua
var streamReplySrc string

var streamReply = redis.NewScript(aclSrc + nowSrc + expirySrc + dedupSrc + streamReplySrc)

// StreamReply appends replies (each its field/value pairs, encoded by the caller) to the
// stream dest and acknowledges entry id of stream in group, in one script: all or
// nothing (see stream_reply.lua), and only while the entry is still pending to consumer
// (else ErrNotOwner, nothing written). With marks (settle.Dedupe; nil: none), the
// entry's dedup key (marks.Keys[0]) is marked completed in the same step.
func StreamReply(ctx context.Context, rdb redis.Scripter, dest, stream, group, consumer, id string, replies [][]any, marks *Marks) error {
	n := 6
	for _, r := range replies {
		n += 1 + len(r)
	}
	keys := []string{dest, stream}
	args := make([]any, 0, n)
	args = append(args, group, consumer, id)
	if marks != nil {
		keys = append(keys, marks.Set)
		args = append(args, nowArg(marks.Now), windowMs(marks.Window), marks.Keys[0])
	}
	for _, r := range replies {
		args = append(args, len(r))
		args = append(args, r...)
	}
	if err := streamReply.Run(ctx, rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("stream reply script: %w", notOwner(err))
	}
	return nil
}
