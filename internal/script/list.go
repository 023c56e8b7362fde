package script

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

//go:embed list_move.lua
var listMoveSrc string

var listMove = redis.NewScript(aclSrc + listMoveSrc)

// ListMove is one move of a ListMoves batch: an item of the processing list, and the
// value pushed to Dest in its place.
type ListMove struct {
	// Dest is the list the value is pushed to.
	Dest string
	// Item is the item to take out of the processing list, byte for byte.
	Item string
	// Value is what is pushed to the tail of Dest.
	Value []byte
}

// ErrItemGone reports a move of an item that is no longer in the processing list:
// orphan recovery took it (the consumer's heartbeat lapsed), or the list itself is gone
// (deleted, or Redis lost its data). Nothing was written.
var ErrItemGone = errors.New("the item is no longer in the processing list (recovered by another consumer after this one's heartbeat lapsed, or the list was deleted, as by a Redis restart that lost its data); nothing written")

// ListMoves takes items out of a reliable list consumer's processing list and pushes a
// value to a list in place of each one, in one script call (see list_move.lua): each
// move all or nothing on its own, and only if its item was still there. It returns each
// move's error, in order: nil when it was applied; ErrItemGone; an error naming its
// destination when that key is not a list; or, when the call itself failed (the
// connection, a processing list of the wrong type), the call's error: nothing was
// written, unless the call ran and only its reply was lost.
func ListMoves(ctx context.Context, rdb redis.Scripter, processing string, moves []ListMove) []error {
	keys := []string{processing}
	args := make([]any, 0, 3*len(moves))
	for _, m := range moves {
		k := slices.Index(keys[1:], m.Dest) + 2
		if k == 1 {
			keys = append(keys, m.Dest)
			k = len(keys)
		}
		args = append(args, k, m.Item, m.Value)
	}
	errs := make([]error, len(moves))
	replies, err := listMove.Run(ctx, rdb, keys, args...).Slice()
	if err == nil && len(replies) != len(moves) {
		err = fmt.Errorf("%d replies for %d moves", len(replies), len(moves))
	}
	if err != nil {
		err = fmt.Errorf("list move script: %w", err)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, r := range replies {
		switch r {
		case int64(1):
		case int64(0):
			errs[i] = ErrItemGone
		default:
			if e, ok := r.(error); ok {
				errs[i] = fmt.Errorf("list move script: %w", e)
			} else {
				errs[i] = fmt.Errorf("list move script: unexpected reply %v", r)
			}
		}
	}
	return errs
}

//go:embed list_take.lua
var listTakeSrc string

var listTake = newOnceScript(aclSrc + listTakeSrc)

// MaxListTake is the most items one ListTake call moves.
const MaxListTake = 4000

// ListTake moves up to n items (at most MaxListTake; none when n < 1) from the head of list to the tail
// of a reliable list consumer's processing list, in one script call (see
// list_take.lua), and returns them, head first; none when list is empty. The call is
// never sent twice: should its reply be lost, the items it moved wait in the processing
// list, unknown to the caller, which must then read that list again.
func ListTake(ctx context.Context, rdb Processor, list, processing string, n int) ([]string, error) {
	if n < 1 {
		return nil, nil
	}
	items, err := listTake.run(ctx, rdb, []string{list, processing}, min(n, MaxListTake)).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list take script: %w", err)
	}
	return items, nil
}

//go:embed list_done.lua
var listDoneSrc string

var listDone = redis.NewScript(aclSrc + nowSrc + expirySrc + dedupSrc + listDoneSrc)

// maxListDone is the most items one list_done call takes out.
const maxListDone = 1000

// ListDone takes completed items out of a reliable list consumer's processing list,
// each once, byte for byte (from the head, else from the tail), in one script call per
// 1,000 items (see list_done.lua), and, with marks (settle.Dedupe; nil: none), marks
// the dedup key of each item removed in the same call. It returns, in order, whether
// each was there; an error when a call failed (its items are then reported not removed,
// though the call may have run and only its reply been lost).
func ListDone(ctx context.Context, rdb redis.Scripter, processing string, items []string, marks *Marks) ([]bool, error) {
	removed := make([]bool, len(items))
	var firstErr error
	for lo := 0; lo < len(items); lo += maxListDone {
		hi := min(lo+maxListDone, len(items))
		chunk := items[lo:hi]
		keys := []string{processing}
		args := make([]any, 0, 2+2*len(chunk))
		if marks != nil {
			keys = append(keys, marks.Set)
			args = append(args, nowArg(marks.Now), windowMs(marks.Window))
		}
		for _, it := range chunk {
			args = append(args, it)
		}
		if marks != nil {
			for _, k := range marks.Keys[lo:hi] {
				args = append(args, k)
			}
		}
		replies, err := listDone.Run(ctx, rdb, keys, args...).Int64Slice()
		if err == nil && len(replies) != len(chunk) {
			err = fmt.Errorf("%d replies for %d items", len(replies), len(chunk))
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("list done script: %w", err)
			}
			continue
		}
		for i, r := range replies {
			removed[lo+i] = r == 1
		}
	}
	return removed, firstErr
}

//go:embed list_recover.lua
var listRecoverSrc string

// ListRecover moves the items of a dead reliable list consumer back to the list or to
// the dead-letter list, only while its heartbeat is absent (see list_recover.lua).
//
//	KEYS: heartbeat, processing list, source list, dead-letter list, consumer set
//	ARGV: check heartbeat ("1"/"0"), consumer name, (item, "list"|"dead"|"drop", value)…
//	reply: -1 alive, else the 1-based positions of the items taken
//
// Call it through RunListRecover, which reads the reply.
var ListRecover = redis.NewScript(aclSrc + listRecoverSrc)

// RunListRecover runs ListRecover and returns the positions (0-based, in the order of
// the triples in args) of the items it took, or alive when the consumer's heartbeat
// was present and nothing was done. On an error it is not known what was taken.
func RunListRecover(ctx context.Context, rdb redis.Scripter, keys []string, args ...any) (taken []int, alive bool, err error) {
	reply, err := ListRecover.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return nil, false, fmt.Errorf("list recover script: %w", err)
	}
	switch r := reply.(type) {
	case int64:
		if r == -1 {
			return nil, true, nil
		}
	case []any:
		taken = make([]int, len(r))
		for i, p := range r {
			n, ok := p.(int64)
			if !ok || n < 1 {
				return nil, false, fmt.Errorf("list recover script: unexpected position %v", p)
			}
			taken[i] = int(n - 1)
		}
		return taken, false, nil
	}
	return nil, false, fmt.Errorf("list recover script: unexpected reply %v", reply)
}
