package admin

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// SeekOption configures Seek: DryRun (Limit does not apply).
type SeekOption interface {
	applySeek(*actionConfig)
}

func (o SelectionOption) applySeek(c *actionConfig) { o.set(c) }

// SeekResult is what Seek did (or, in a dry run, would do).
type SeekResult struct {
	// At is the time the group was moved to, from the entry id ("0" and "$" have none:
	// zero).
	At time.Time
	// DryRun reports that the group was not moved.
	DryRun bool
	// From is the group's last-delivered id before the seek.
	From string
	// Group is the consumer group.
	Group string
	// Key is the stream.
	Key string
	// To is the id the group was moved to: the entries after it are delivered again.
	To string
}

// seekIDRe is what Seek takes as an entry id: <ms>-<seq> or <ms>.
var seekIDRe = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// Seek moves the consumer group of the stream key to the position to (XGROUP SETID), as
// settle.StreamSource.Seek does, so that the entries after it are delivered again, as
// new deliveries, to whichever consumers of the group read next (a replayed entry's
// attempt comes from its retry-count header, which Seek does not change). to is:
//
//   - an entry id: "<ms>-<seq>", "<ms>" (that is "<ms>-0"), "0" (the whole stream again)
//     or "$" (skip to the end);
//   - a duration ago, by the Redis server's clock: "2h", "90m";
//   - a time, RFC 3339: "2026-01-02T15:04:05Z".
//
// A time moves the group to "<ms>-0" of it: the entries added from that millisecond on
// are delivered again (one with the id "<ms>-0" exactly is not). Entries pending in the
// group stay pending. A seek run twice leaves the group where the first put it (for a
// duration ago, a little later on). A missing key, a key that is not a stream, a group
// the stream does not have (Seek never makes one), a to that does not parse or a time
// in the future is refused with an error naming it, and the group is left where it was.
//
// miniredis does not implement XGROUP SETID: there Seek fails (its dry run works).
func (i *Inspector) Seek(ctx context.Context, key, group, to string, opts ...SeekOption) (*SeekResult, error) {
	cfg := configure(opts, SeekOption.applySeek)
	if cfg.limit != 0 {
		return nil, fmt.Errorf("admin: Limit(%d) does not apply to Seek", cfg.limit)
	}
	id, at, err := i.seekTarget(ctx, to)
	if err != nil {
		return nil, err
	}
	g, err := i.groupInfo(ctx, key, group)
	if err != nil {
		return nil, err
	}
	res := &SeekResult{At: at, DryRun: cfg.dryRun, From: g.LastDeliveredID, Group: group, Key: key, To: id}
	if cfg.dryRun {
		return res, nil
	}
	if err := i.rdb.XGroupSetID(ctx, key, group, id).Err(); err != nil {
		return nil, fmt.Errorf("admin: stream %q: seek group %q to %q: %w", key, group, id, err)
	}
	return res, nil
}

// seekTarget turns Seek's to into an entry id, and the time it stands for.
func (i *Inspector) seekTarget(ctx context.Context, to string) (string, time.Time, error) {
	switch {
	case to == "0" || to == "$":
		return to, time.Time{}, nil
	case seekIDRe.MatchString(to):
		return to, IDTime(to), nil
	}
	var at time.Time
	if d, err := time.ParseDuration(to); err == nil {
		if d < 0 {
			return "", time.Time{}, fmt.Errorf("admin: seek to %q: a duration ago must not be negative", to)
		}
		now, err := i.now(ctx)
		if err != nil {
			return "", time.Time{}, err
		}
		at = now.Add(-d)
	} else if t, err := time.Parse(time.RFC3339Nano, to); err == nil {
		now, err := i.now(ctx)
		if err != nil {
			return "", time.Time{}, err
		}
		if t.After(now) {
			return "", time.Time{}, fmt.Errorf("admin: seek to %q: the time is in the future (the Redis server's clock says %s)", to, now.UTC().Format(time.RFC3339))
		}
		at = t
	} else {
		return "", time.Time{}, fmt.Errorf("admin: seek to %q: neither an entry id (<ms>-<seq>, <ms>, 0, $), a duration ago (2h) nor an RFC 3339 time", to)
	}
	ms := max(at.UnixMilli(), 0)
	return strconv.FormatInt(ms, 10) + "-0", time.UnixMilli(ms), nil
}
