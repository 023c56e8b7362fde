package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/source"
)

//go:embed stream_move.lua
var streamMoveSrc string

var streamMove = redis.NewScript(aclSrc + streamMoveSrc)

// Move is one entry of a StreamMoves batch: the entry to acknowledge and the new entry's
// field/value pairs, encoded by the caller.
type Move struct {
	// ID is the entry of the source stream to acknowledge.
	ID string
	// Values are the new entry's field/value pairs.
	Values []any
}

// StreamMove appends an entry (values: field/value pairs, encoded by the caller) to the
// stream dest, bounded to about maxLen entries when maxLen > 0 (XADD MAXLEN ~), and
// acknowledges entry id of stream in group: all or nothing (see stream_move.lua), and
// only while the entry is still pending to consumer (else ErrNotOwner, nothing written).
// A stream's retry copy (dest = stream) and its dead letter are both this one step.
func StreamMove(ctx context.Context, rdb redis.Scripter, dest, stream, group, consumer, id string, maxLen int64, values []any) error {
	return StreamMoves(ctx, rdb, dest, stream, group, consumer, maxLen, []Move{{ID: id, Values: values}})[0]
}

// StreamMoves is StreamMove for many entries of stream in one script call: each move is
// all or nothing on its own, checked and answered on its own (a move that fails leaves
// its entry pending and the others go on). It returns each move's error, in order: nil
// when it was applied; ErrNotOwner, a refused XADD, or, when the call itself failed
// (the connection, a destination of the wrong type), the call's error: nothing was
// written, unless the call ran and only its reply was lost.
func StreamMoves(ctx context.Context, rdb redis.Scripter, dest, stream, group, consumer string, maxLen int64, moves []Move) []error {
	n := 5
	for _, m := range moves {
		n += 2 + len(m.Values)
	}
	lo, hi := idRange(moves)
	args := make([]any, 0, n)
	args = append(args, group, strconv.FormatInt(maxLen, 10), consumer, lo, hi)
	for _, m := range moves {
		args = append(args, m.ID, len(m.Values))
		args = append(args, m.Values...)
	}
	errs := make([]error, len(moves))
	replies, err := streamMove.Run(ctx, rdb, []string{dest, stream}, args...).Slice()
	if err == nil && len(replies) != len(moves) {
		err = fmt.Errorf("%d replies for %d moves", len(replies), len(moves))
	}
	if err != nil {
		err = fmt.Errorf("stream move script: %w", notOwner(err))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, r := range replies {
		switch r := r.(type) {
		case int64:
			if r != 1 {
				errs[i] = fmt.Errorf("stream move script: unexpected reply %d for entry %s", r, moves[i].ID)
			}
		case error:
			errs[i] = fmt.Errorf("stream move script: %w", notOwner(r))
		default:
			errs[i] = fmt.Errorf("stream move script: unexpected reply %T for entry %s", r, moves[i].ID)
		}
	}
	return errs
}

// idRange returns the least and the greatest entry id of moves, the range of the
// script's one owner check. An id that does not parse is left out (the script checks it
// on its own); "-" and "+" bound a batch of only such ids.
func idRange(moves []Move) (lo, hi string) {
	var loMs, loSeq, hiMs, hiSeq uint64
	for _, m := range moves {
		ms, seq, ok := parseID(m.ID)
		if !ok {
			continue
		}
		if lo == "" || ms < loMs || ms == loMs && seq < loSeq {
			lo, loMs, loSeq = m.ID, ms, seq
		}
		if hi == "" || ms > hiMs || ms == hiMs && seq > hiSeq {
			hi, hiMs, hiSeq = m.ID, ms, seq
		}
	}
	if lo == "" {
		return "-", "+"
	}
	return lo, hi
}

// IDAfter reports whether stream entry id a comes after b; an id that does not parse
// comes before every one that does.
func IDAfter(a, b string) bool {
	ams, aseq, aok := parseID(a)
	bms, bseq, bok := parseID(b)
	if !aok || !bok {
		return aok && !bok
	}
	return ams > bms || ams == bms && aseq > bseq
}

// parseID splits a stream entry id "<ms>-<seq>".
func parseID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

// ErrNotOwner reports a settlement of a stream entry that is no longer pending to the
// consumer settling it: another consumer claimed it (the first one stalled past
// min-idle), it was settled already, or its group is not the one that delivered it.
// Nothing was written.
var ErrNotOwner = source.TakenOver("entry is no longer pending to this consumer (another consumer claimed it, or it was settled already); nothing written")

// notOwner turns the scripts' NOTOWNER error reply into ErrNotOwner.
func notOwner(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "NOTOWNER") {
		return fmt.Errorf("%w (%v)", ErrNotOwner, err)
	}
	return err
}
