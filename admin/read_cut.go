package admin

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/wire"
)

// PageCut is the bytes of each field (the payload, each header) that a listing reads
// of an entry: DeadLetterStore.Page and the summaries cut there, so a page costs
// O(page) memory whatever the entries hold. Entry.Size says how large the payload is;
// Inspector.PayloadChunk reads the whole in pieces.
const PageCut = 64 << 10

// summaryCut is the bytes of each field a summary's sample reads: enough for a
// reason, an error's first line and a source.
const summaryCut = 1 << 10

//go:embed read_cut.lua
var readCutSrc string

var readCut = redis.NewScript(readCutSrc)

// cutEntry is an entry read with its values cut, and each value's full length.
type cutEntry struct {
	msg   redis.XMessage
	sizes map[string]int64
}

// xrangeCut is XRANGE key start end COUNT count (XREVRANGE key end start with rev),
// each value cut to cut bytes, run in Redis (read_cut.lua); only the fields named when
// fields are given.
func (i *Inspector) xrangeCut(ctx context.Context, key, start, end string, count int64, cut int, rev bool, fields ...string) ([]cutEntry, error) {
	dir := ""
	if rev {
		dir = "rev"
	}
	args := []any{start, end, count, cut, dir}
	for _, f := range fields {
		args = append(args, f)
	}
	res, err := readCut.Run(ctx, i.rdb, []string{key}, args...).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]cutEntry, 0, len(res))
	for _, r := range res {
		e, ok := r.([]any)
		if !ok || len(e) != 2 {
			return nil, fmt.Errorf("read_cut.lua: unexpected reply %T", r)
		}
		id, _ := e[0].(string)
		fields, _ := e[1].([]any)
		ce := cutEntry{msg: redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/3)}, sizes: make(map[string]int64, len(fields)/3)}
		for k := 0; k+2 < len(fields); k += 3 {
			name, _ := fields[k].(string)
			v, _ := fields[k+1].(string)
			n, _ := fields[k+2].(int64)
			ce.msg.Values[name], ce.sizes[name] = v, n
		}
		out = append(out, ce)
	}
	return out, nil
}

//go:embed read_chunk.lua
var readChunkSrc string

var readChunk = redis.NewScript(readChunkSrc)

// PayloadChunk returns at most n bytes of the payload of entry id of the stream key,
// from offset, and the payload's full length: a payload of any size is read in pieces
// of bounded size. An entry (or a payload field) that is not there is an error wrapping
// ErrEntryNotFound.
func (i *Inspector) PayloadChunk(ctx context.Context, key, id string, offset, n int64) ([]byte, int64, error) {
	res, err := readChunk.Run(ctx, i.rdb, []string{key}, id, wire.FieldPayload, offset, n).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("admin: stream %q: entry %s: %w", key, id, err)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("admin: read_chunk.lua: unexpected reply %v", res)
	}
	size, _ := res[1].(int64)
	piece, ok := res[0].(string)
	if !ok || size < 0 {
		return nil, 0, fmt.Errorf("%w: stream %q has no entry %s with a payload", ErrEntryNotFound, key, id)
	}
	return []byte(piece), size, nil
}
