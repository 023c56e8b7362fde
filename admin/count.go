package admin

import (
	"context"
	"fmt"
)

// DeadLetterCount returns how many dead letters the dead-letter stream key holds (XLEN),
// or a dead-letter list (LLEN) when list is true: one command, where DeadLetterSummary
// reads them all, for a view that refreshes often. A missing key holds none; a key of
// another type is an error wrapping ErrWrongType.
func (i *Inspector) DeadLetterCount(ctx context.Context, key string, list bool) (int64, error) {
	want, noun := "stream", "dead-letter stream"
	if list {
		want, noun = "list", "dead-letter list"
	}
	if err := i.mustBe(ctx, key, want, noun, true); err != nil {
		return 0, err
	}
	var n int64
	var err error
	if list {
		n, err = i.rdb.LLen(ctx, key).Result()
	} else {
		n, err = i.rdb.XLen(ctx, key).Result()
	}
	if err != nil {
		return 0, fmt.Errorf("admin: %s %q: count: %w", noun, key, err)
	}
	return n, nil
}
