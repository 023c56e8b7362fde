// Package admin is settle's operator API: it inspects what settle holds in Redis and
// acts on it. The settle command line, the web console and the metrics gauges all call
// it, as asynq's CLI and UI call its Inspector.
//
// # Views
//
// Each view is one call and changes nothing: [Inspector.Stream] (a stream and one of
// its consumer groups: length, lag, pending entries, consumers, dead consumers),
// [Inspector.DeadLetterSummary] (a dead-letter stream grouped by reason, normalised
// error and source), [Inspector.DeadLetters] (its entries), [Inspector.Length]
// (how many a stream or list holds), [Inspector.Peek] (one entry, its payload decoded),
// [Inspector.DelaySet] (a durable delay set: size, next due, overdue),
// [Inspector.ReliableList] (a reliable list: length, each consumer's
// processing list, heartbeat alive or orphaned), and [Inspector.ListDeadLetterSummary]
// and [Inspector.ListDeadLetters] (a dead-letter list, its members named by index),
// [Inspector.PartitionedStream] (a partitioned stream's group: each partition's owner,
// lease, backlog and dead letters, and the live members) and [Inspector.Limits] (a
// mount's flow limits: rate, in use, keys at their limit).
// [Inspector.Find] answers "where is this message?": given an id, an origin id or a
// header name=value, it lists every copy of the message across a mount's stream, delay
// set, dead letter and replies, reading a bounded range of each and saying which.
// "Now" is the Redis server's TIME, never this host's clock.
//
// # Actions
//
// [Inspector.Replay] moves dead letters back to the stream they came from (or to
// another), attempt reset; [Inspector.Purge] deletes them. [Inspector.ReleasePending]
// hands a stuck pending entry back to its group, [Inspector.DeadLetterPending]
// dead-letters it now, [Inspector.PruneConsumers] removes consumers holding nothing,
// [Inspector.Promote] and [Inspector.Cancel] act on delay-set members, and
// [Inspector.Seek] moves a group to an id or a time; [Inspector.ReplayList] and
// [Inspector.PurgeList] are Replay and Purge for a dead-letter list. Both take a [Filter] that
// selects dead letters, and options: [DryRun], [Limit], and for a replay [Rate] and
// [To]. Each dead letter moves in one Lua script (append to the destination, delete
// from the dead letter), so a replay interrupted by a crash and run again moves nothing
// twice. Bad input (a missing key, a key of the wrong type, an id not found, a filter
// that does not compile, a destination in another cluster slot) is refused with an
// error naming it before anything changes.
//
// [DeadLetterStore] is a dead letter of any kind behind one interface
// ([Inspector.StreamDeadLetters], [Inspector.ListDeadLetterStore]). A dry run returns the
// [Selection] it showed (the filter, the count and the newest shown); acting on that
// Selection touches at most those dead letters, never one that arrived since, and says
// how many of them were gone meanwhile.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors the views and actions wrap (test with errors.Is); each error names the key,
// group or id it is about.
var (
	// ErrCrossSlot reports a replay destination in another cluster hash slot than the
	// dead-letter stream: the one script that moves an entry cannot touch both.
	ErrCrossSlot = errors.New("admin: keys in different cluster slots")
	// ErrEntryNotFound reports an entry id that is not in the stream.
	ErrEntryNotFound = errors.New("admin: entry not found")
	// ErrGroupNotFound reports a consumer group the stream does not have.
	ErrGroupNotFound = errors.New("admin: consumer group not found")
	// ErrKeyNotFound reports a key that does not exist.
	ErrKeyNotFound = errors.New("admin: key not found")
	// ErrWrongType reports a key that holds another type than the call reads.
	ErrWrongType = errors.New("admin: key of the wrong type")
)

// Inspector inspects and acts on settle's keys in one Redis (a server, a cluster, a
// failover group). It is safe for concurrent use.
type Inspector struct {
	checkSlots bool // refuse moves across cluster slots (a ClusterClient or a Ring)
	rdb        redis.UniversalClient
}

// NewInspector returns an Inspector using rdb, which the caller keeps and closes. On a
// *redis.ClusterClient (or a *redis.Ring, which shards by key too) a replay refuses a
// destination in another hash slot than the dead-letter stream.
func NewInspector(rdb redis.UniversalClient) *Inspector {
	i := &Inspector{rdb: rdb}
	switch rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		i.checkSlots = true
	}
	return i
}

// mustBe returns nil when key holds a value of type want ("stream", "zset"), else an
// error wrapping ErrKeyNotFound or ErrWrongType that names key and what it is (noun).
// A missing key is no error when missingOK.
func (i *Inspector) mustBe(ctx context.Context, key, want, noun string, missingOK bool) error {
	got, err := i.rdb.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("admin: %s %q: type: %w", noun, key, err)
	}
	switch {
	case got == want:
		return nil
	case got == "none" && missingOK:
		return nil
	case got == "none":
		return fmt.Errorf("%w: %s %q does not exist", ErrKeyNotFound, noun, key)
	}
	return fmt.Errorf("%w: %s %q holds a %s, not a %s", ErrWrongType, noun, key, got, want)
}

// now returns the Redis server's time.
func (i *Inspector) now(ctx context.Context) (time.Time, error) {
	t, err := i.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("admin: time: %w", err)
	}
	return t, nil
}

// IDTime returns the time a stream entry id was made: its milliseconds part ("<ms>-<seq>").
// An id that does not parse gives the zero time.
func IDTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
