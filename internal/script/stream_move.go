package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed stream_move.lua
var streamMoveSrc string

var streamMove = redis.NewScript(streamMoveSrc)

// StreamMove appends an entry (values: field/value pairs, encoded by the caller) to the
// stream dest, bounded to about maxLen entries when maxLen > 0 (XADD MAXLEN ~), and
// acknowledges entry id of stream in group: all or nothing (see stream_move.lua). A
// stream's retry copy (dest = stream) and its dead letter are both this one step. It
// returns the new entry's id.
func StreamMove(ctx context.Context, rdb redis.Scripter, dest, stream, group, id string, maxLen int64, values []any) (string, error) {
	args := make([]any, 0, 3+len(values))
	args = append(args, group, id, strconv.FormatInt(maxLen, 10))
	args = append(args, values...)
	newID, err := streamMove.Run(ctx, rdb, []string{dest, stream}, args...).Text()
	if err != nil {
		return "", fmt.Errorf("stream move script: %w", err)
	}
	return newID, nil
}
