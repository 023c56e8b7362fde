package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed stream_move.lua
var streamMoveSrc string

var streamMove = redis.NewScript(streamMoveSrc)

// StreamMove appends an entry (values: field/value pairs, encoded by the caller) to the
// stream dest, bounded to about maxLen entries when maxLen > 0 (XADD MAXLEN ~), and
// acknowledges entry id of stream in group: all or nothing (see stream_move.lua), and
// only while the entry is still pending to consumer (else ErrNotOwner, nothing written).
// A stream's retry copy (dest = stream) and its dead letter are both this one step. It
// returns the new entry's id.
func StreamMove(ctx context.Context, rdb redis.Scripter, dest, stream, group, consumer, id string, maxLen int64, values []any) (string, error) {
	args := make([]any, 0, 4+len(values))
	args = append(args, group, id, strconv.FormatInt(maxLen, 10), consumer)
	args = append(args, values...)
	newID, err := streamMove.Run(ctx, rdb, []string{dest, stream}, args...).Text()
	if err != nil {
		return "", fmt.Errorf("stream move script: %w", notOwner(err))
	}
	return newID, nil
}

// ErrNotOwner reports a settlement of a stream entry that is no longer pending to the
// consumer settling it: another consumer claimed it (the first one stalled past
// min-idle) or it was settled already. Nothing was written.
var ErrNotOwner = errors.New("entry is no longer pending to this consumer: another consumer took it over; nothing written")

// notOwner turns the scripts' NOTOWNER error reply into ErrNotOwner.
func notOwner(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "NOTOWNER") {
		return fmt.Errorf("%w (%v)", ErrNotOwner, err)
	}
	return err
}
