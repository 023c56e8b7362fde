package admin

import (
	"context"
	"fmt"
)

// Length returns how many entries a stream, or items a list, key holds (a dead-letter
// stream or list, say): one XLEN or LLEN, cheap enough for a metrics gauge read at
// every collection or overview refresh (DeadLetterSummary reads them all). A missing
// key holds none; a key of another type is an error wrapping ErrWrongType.
func (i *Inspector) Length(ctx context.Context, key string) (int64, error) {
	t, err := i.rdb.Type(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("admin: type %q: %w", key, err)
	}
	switch t {
	case "none":
		return 0, nil
	case "stream":
		return i.rdb.XLen(ctx, key).Result()
	case "list":
		return i.rdb.LLen(ctx, key).Result()
	default:
		return 0, fmt.Errorf("admin: %q is a %s, not a stream or a list: %w", key, t, ErrWrongType)
	}
}
