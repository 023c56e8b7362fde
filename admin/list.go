package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// ReliableListInfo is a reliable list and its consumers, as Inspector.ReliableList sees
// them.
type ReliableListInfo struct {
	// Consumers are the consumers registered in the list's consumer set, by name.
	Consumers []ListConsumer
	// Key is the list's key.
	Key string
	// Length is how many items wait in the list (LLEN; 0 when the key does not exist).
	Length int64
	// Orphaned names the consumers whose heartbeat has expired while their processing
	// list still holds items: their process probably died, and a live consumer of the
	// list takes the items over.
	Orphaned []string
	// Processing is how many items all the consumers' processing lists hold.
	Processing int64
}

// ListConsumer is one consumer of a reliable list.
type ListConsumer struct {
	// Alive reports that the consumer's heartbeat key exists.
	Alive bool
	// HeartbeatTTL is how long the heartbeat has left (0 when it is gone; -1 when it has
	// no expiry).
	HeartbeatTTL time.Duration
	// Name is the consumer's name (settle.Consumer).
	Name string
	// Orphaned reports that the heartbeat is gone and the processing list holds items.
	Orphaned bool
	// Processing is how many items the consumer's processing list holds.
	Processing int64
	// ProcessingKey is the consumer's processing list (settle.ProcessingList).
	ProcessingKey string
}

// ReliableList returns the reliable list key: its length and each consumer of its
// consumer set with its processing list's length and whether its heartbeat is alive
// or orphaned (LLEN, SMEMBERS, then an LLEN and a PTTL per consumer: not one snapshot).
// On a plain settle.List there are no consumers. A key that is not a list (or a
// consumer set that is not a set) is an error wrapping ErrWrongType; a key with neither
// items nor consumers (an empty list does not exist in Redis) wraps ErrKeyNotFound.
func (i *Inspector) ReliableList(ctx context.Context, key string) (*ReliableListInfo, error) {
	if err := i.mustBe(ctx, key, "list", "list", true); err != nil {
		return nil, err
	}
	set := keys.ListConsumers(key)
	if err := i.mustBe(ctx, set, "set", "consumer set", true); err != nil {
		return nil, err
	}
	info := &ReliableListInfo{Key: key}
	var err error
	if info.Length, err = i.rdb.LLen(ctx, key).Result(); err != nil {
		return nil, fmt.Errorf("admin: list %q: llen: %w", key, err)
	}
	names, err := i.rdb.SMembers(ctx, set).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: list %q: smembers %s: %w", key, set, err)
	}
	if len(names) == 0 {
		exists, err := i.rdb.Exists(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: list %q: exists: %w", key, err)
		}
		if exists == 0 {
			return nil, fmt.Errorf("%w: list %q does not exist and has no consumers (%s is empty)", ErrKeyNotFound, key, set)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		c := ListConsumer{Name: name, ProcessingKey: keys.ListProcessing(key, name)}
		if c.Processing, err = i.rdb.LLen(ctx, c.ProcessingKey).Result(); err != nil {
			return nil, fmt.Errorf("admin: list %q consumer %q: llen %s: %w", key, name, c.ProcessingKey, err)
		}
		hb := keys.ListHeartbeat(key, name)
		ttl, err := i.rdb.PTTL(ctx, hb).Result()
		if err != nil {
			return nil, fmt.Errorf("admin: list %q consumer %q: pttl %s: %w", key, name, hb, err)
		}
		switch {
		case ttl == -2: // no such key: the heartbeat expired
		case ttl < 0:
			c.Alive, c.HeartbeatTTL = true, -1
		default:
			c.Alive, c.HeartbeatTTL = true, ttl
		}
		c.Orphaned = !c.Alive && c.Processing > 0
		if c.Orphaned {
			info.Orphaned = append(info.Orphaned, name)
		}
		info.Processing += c.Processing
		info.Consumers = append(info.Consumers, c)
	}
	return info, nil
}

// ListDeadLetter is one member of a dead-letter list, decoded from settle's envelope.
// A list member has no id: its Entry.ID is its index in the list (0 first, from the
// head) as text, which Filter.IDs selects by, and its Entry.Time is its HeaderDeadAt
// (settle.HeaderDeadAt; the zero time when it carries none).
type ListDeadLetter struct {
	DeadLetter
	// Index is the member's index when it was read. Indexes move when members before
	// it are removed; an action removes the exact Member, never by index.
	Index int64
	// Member is the member as it is stored, byte for byte.
	Member string
}

// ListDeadLetters returns the dead letters of the dead-letter list key that f selects,
// from the head (oldest first), at most limit of them (limit <= 0: all). f.IDs are
// indexes ("0", "3"); f.Since and f.Until read each member's HeaderDeadAt, and a member
// without one is not selected by them. A key that does not exist is an empty
// dead-letter list (Redis deletes an emptied list); one that is not a list is an error
// wrapping ErrWrongType.
func (i *Inspector) ListDeadLetters(ctx context.Context, key string, f Filter, limit int) ([]ListDeadLetter, error) {
	var out []ListDeadLetter
	err := i.scanList(ctx, key, f, limit, func(d ListDeadLetter) { out = append(out, d) })
	return out, err
}

// ListDeadLetterSummary counts and groups the dead letters of the dead-letter list key
// that f selects, as DeadLetterSummary does for a stream. Oldest and Newest are indexes
// (the first and last selected, from the head), OldestAt and NewestAt their
// HeaderDeadAt.
func (i *Inspector) ListDeadLetterSummary(ctx context.Context, key string, f Filter) (*DeadLetterSummary, error) {
	return summarize(key, func(each func(DeadLetter)) error {
		return i.scanList(ctx, key, f, 0, func(d ListDeadLetter) { each(d.DeadLetter) })
	})
}

// sampleListSummary is ListDeadLetterSummary over the newest sample members (LRANGE
// -sample -1: the tail, where dead letters are appended), plus LLEN.
func (i *Inspector) sampleListSummary(ctx context.Context, key string, f Filter, sample int) (*DeadLetterSummary, error) {
	if sample <= 0 || len(f.IDs) > 0 {
		return i.ListDeadLetterSummary(ctx, key, f)
	}
	m, err := f.compile()
	if err != nil {
		return nil, err
	}
	if err := i.mustBe(ctx, key, "list", "dead-letter list", true); err != nil {
		return nil, err
	}
	n, err := i.rdb.LLen(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: dead-letter list %q: llen: %w", key, err)
	}
	first := max(n-int64(sample), 0)
	members, err := i.rdb.LRange(ctx, key, first, n-1).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: dead-letter list %q: lrange: %w", key, err)
	}
	s, err := summarize(key, func(each func(DeadLetter)) error {
		for k, member := range members {
			if d := listDeadLetterOf(key, first+int64(k), member); m.match(&d.DeadLetter) {
				each(d.DeadLetter)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if first > 0 {
		s.Sampled = len(members)
	}
	s.Total = n
	return s, nil
}

func (i *Inspector) scanList(ctx context.Context, key string, f Filter, limit int, each func(ListDeadLetter)) error {
	m, err := f.compile()
	if err != nil {
		return err
	}
	if err := i.mustBe(ctx, key, "list", "dead-letter list", true); err != nil {
		return err
	}
	n := 0
	take := func(index int64, member string) bool {
		d := listDeadLetterOf(key, index, member)
		if m.match(&d.DeadLetter) {
			each(d)
			n++
		}
		return limit <= 0 || n < limit
	}
	if len(f.IDs) > 0 {
		return i.scanIndexes(ctx, key, f.IDs, f.lenient, take)
	}
	first := int64(0)
	if f.After != "" {
		after, err := strconv.ParseInt(f.After, 10, 64)
		if err != nil || after < 0 {
			return fmt.Errorf("admin: dead-letter list %q: After %q is not an index (0 first)", key, f.After)
		}
		first = after + 1
	}
	for start := first; ; start += scanPage {
		members, err := i.rdb.LRange(ctx, key, start, start+scanPage-1).Result()
		if err != nil {
			return fmt.Errorf("admin: dead-letter list %q: lrange %d %d: %w", key, start, start+scanPage-1, err)
		}
		for k, member := range members {
			if !take(start+int64(k), member) {
				return nil
			}
		}
		if len(members) < scanPage {
			return nil
		}
	}
}

// scanIndexes reads the members at indexes ids of key, refusing (before calling take)
// any that is not an index or not there (skipping one not there when lenient).
func (i *Inspector) scanIndexes(ctx context.Context, key string, ids []string, lenient bool, take func(int64, string) bool) error {
	seen := map[int64]bool{}
	var indexes []int64
	var members, missing, bad []string
	for _, id := range ids {
		index, err := strconv.ParseInt(id, 10, 64)
		if err != nil || index < 0 {
			bad = append(bad, strconv.Quote(id))
			continue
		}
		if seen[index] {
			continue
		}
		seen[index] = true
		member, err := i.rdb.LIndex(ctx, key, index).Result()
		switch {
		case errors.Is(err, redis.Nil):
			missing = append(missing, id)
			continue
		case err != nil:
			return fmt.Errorf("admin: dead-letter list %q: index %d: %w", key, index, err)
		}
		indexes, members = append(indexes, index), append(members, member)
	}
	if len(bad) > 0 {
		return fmt.Errorf("admin: dead-letter list %q: %s: a list member has no id, select it by its index (0 first)", key, strings.Join(bad, ", "))
	}
	if len(missing) > 0 && !lenient {
		return fmt.Errorf("%w: dead-letter list %q has no index %s", ErrEntryNotFound, key, strings.Join(missing, ", "))
	}
	for k, member := range members {
		if !take(indexes[k], member) {
			break
		}
	}
	return nil
}

func listDeadLetterOf(key string, index int64, member string) ListDeadLetter {
	e := Entry{HasPayload: true, ID: strconv.FormatInt(index, 10), Key: key}
	payload, headers, _, err := wire.FromEnvelope([]byte(member))
	switch {
	case err != nil:
		e.Payload, e.HasPayload = []byte(member), false
		headers = map[string]string{settle.HeaderInvalidEnvelope: err.Error()}
	case headers == nil:
		headers = map[string]string{}
	}
	if err == nil {
		e.Payload = payload
	}
	e.Headers = headers
	if at, err := time.Parse(time.RFC3339, headers[settle.HeaderDeadAt]); err == nil {
		e.Time = at
	}
	return ListDeadLetter{
		DeadLetter: DeadLetter{
			Entry:      e,
			Error:      headers[settle.HeaderDeadError],
			OriginalID: headers[settle.HeaderDeadID],
			Reason:     headers[settle.HeaderDeadReason],
			Source:     headers[settle.HeaderDeadSource],
		},
		Index:  index,
		Member: member,
	}
}

// listSelection is selection for a dead-letter list.
func (i *Inspector) listSelection(ctx context.Context, key string, s Selection, cfg actionConfig) ([]ListDeadLetter, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return i.ListDeadLetters(ctx, key, s.filter(), cfg.bound(s))
}

// ReplayList moves the dead letters of the dead-letter list key that f selects back to
// the list each was read from (settle.HeaderDeadSource), or to the one To names, from
// the head, as Replay does for a stream: settle's own headers removed, so its attempts
// start again, HeaderReplayedFrom ("<key>/<index>") added, and the value appended
// (RPUSH) to the destination as the publisher appends. Each dead letter moves in one
// Lua script, which removes the exact member (LREM) and pushes only when it removed
// one, so a replay run again, or after a crash, moves nothing twice (a member already
// gone is reported in ReplayResult.Gone). Replayed.ID is the index the member had;
// Replayed.NewID is "".
//
// The checks are Replay's, for lists: a key that is not a list (the dead-letter list or
// a destination; a destination may not exist yet, as an emptied list does not), an
// index of f.IDs not there, a reason regexp that does not compile, a dead letter that
// names no source when To is not given, a destination that is the dead-letter list
// itself, and on Redis Cluster a destination in another hash slot (ErrCrossSlot).
// A member that is not settle's envelope goes back as it is stored.
func (i *Inspector) ReplayList(ctx context.Context, key string, f Filter, opts ...ReplayOption) (*ReplayResult, error) {
	return i.replayList(ctx, key, Selection{Filter: f}, opts)
}

func (i *Inspector) replayList(ctx context.Context, key string, s Selection, opts []ReplayOption) (*ReplayResult, error) {
	cfg := configure(opts, ReplayOption.applyReplay)
	sel, err := i.listSelection(ctx, key, s, cfg)
	if err != nil {
		return nil, err
	}
	return i.replay(ctx, key, "list", s, plainDeadLetters(sel), cfg, func(k int, to string) (string, bool, error) {
		moved, err := script.ListReplay(ctx, i.rdb, to, key, sel[k].Member, replayValue(key, sel[k]))
		return "", moved, err
	})
}

// replayValue is the value a list replay of d pushes: d's payload in an envelope with
// its headers but settle's own, plus HeaderReplayedFrom; a member that was not an
// envelope, as it is.
func replayValue(key string, d ListDeadLetter) []byte {
	if !d.HasPayload {
		return []byte(d.Member)
	}
	return wire.Envelope(d.Payload, replayHeaders(key, d.DeadLetter))
}

// PurgeList deletes the dead letters of the dead-letter list key that f selects: each
// by its exact member (LREM key 1 member, atomic), so a member already gone is not
// counted and a purge run again deletes nothing. PurgeResult.IDs are the indexes the
// members had. The selection is checked as ReplayList's is.
func (i *Inspector) PurgeList(ctx context.Context, key string, f Filter, opts ...PurgeOption) (*PurgeResult, error) {
	return i.purgeList(ctx, key, Selection{Filter: f}, opts)
}

func (i *Inspector) purgeList(ctx context.Context, key string, s Selection, opts []PurgeOption) (*PurgeResult, error) {
	cfg := configure(opts, PurgeOption.applyPurge)
	sel, err := i.listSelection(ctx, key, s, cfg)
	if err != nil {
		return nil, err
	}
	res := purgeResultOf(s, plainDeadLetters(sel), cfg, true)
	if cfg.dryRun {
		return res, nil
	}
	defer func() { res.Meanwhile = meanwhile(s, cfg, int(res.Deleted)) }()
	// One pipeline of LREMs per batch, not a round trip per member: each LREM is still
	// atomic on its own.
	for start := 0; start < len(sel); start += purgeBatch {
		batch := sel[start:min(start+purgeBatch, len(sel))]
		cmds := make([]*redis.IntCmd, len(batch))
		_, err := i.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k, d := range batch {
				cmds[k] = p.LRem(ctx, key, 1, d.Member)
			}
			return nil
		})
		for _, c := range cmds {
			res.Deleted += c.Val()
		}
		if err != nil {
			return res, fmt.Errorf("admin: purge of %q stopped after %d deleted: lrem: %w", key, res.Deleted, err)
		}
	}
	return res, nil
}
