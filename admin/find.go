package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// FindScope names the keys of one mount that Inspector.Find searches. Every key is
// optional; a key that does not exist is searched as empty.
type FindScope struct {
	// DeadLetter is the mount's dead-letter stream.
	DeadLetter string
	// DeadLetterList is a list mount's dead-letter list.
	DeadLetterList string
	// Delayed is the mount's durable delay set.
	Delayed string
	// Group is the consumer group of Stream: with it, an entry found there is told
	// waiting, pending (at which consumer) or settled.
	Group string
	// List is the list a list mount reads (where its retry copies wait too). Its items
	// carry no id: an item is found by its origin header (a retry copy's) or, searched
	// by a header, by that header.
	List string
	// Mount names the mount, for the caller: each Place says in which scope it was found.
	Mount string
	// Replies are the streams the mount's handlers reply to.
	Replies []string
	// Stream is the stream the mount reads (where retry copies and replays go too).
	Stream string
}

// Defaults of a FindQuery.
const (
	// DefaultFindLimit is how many places Find returns at most when the query says
	// nothing.
	DefaultFindLimit = 100
	// DefaultFindScan is how many entries (or delay-set members) Find reads at most of
	// each key when the query says nothing.
	DefaultFindScan = 10_000
	// DefaultFindWindow is how far back a search by header looks when the query gives
	// no Since: a search by id starts from the id's own time.
	DefaultFindWindow = 24 * time.Hour
)

// FindQuery is what Inspector.Find looks for: a message by an id, or by a header.
// Exactly one of ID and Header must be given.
type FindQuery struct {
	// Header names a header (an order id the producer put in one, say); with Value it
	// selects the messages that carry Header=Value.
	Header string
	// ID is a stream entry id: the id of any copy of a message (its first delivery, a
	// retry copy, its dead letter), or its origin id (settle.HeaderOriginID, which every
	// copy carries; a list's delivery has one of its own form). The search starts from
	// the time of the message's first delivery.
	ID string
	// Limit bounds the places returned. Defaults to DefaultFindLimit.
	Limit int
	// Scan bounds the entries read of each stream and the members read of each delay
	// set. Defaults to DefaultFindScan.
	Scan int
	// Since is where the search of each stream starts (by entry id time). Defaults to
	// the time of the message's first delivery for an ID, to DefaultFindWindow before
	// the server's time for a Header.
	Since time.Time
	// Until is where it ends. Defaults to no end.
	Until time.Time
	// Value is the header's value (with Header).
	Value string
}

// ParseFindQuery reads a search as a person types it: "name=value" is a header, an
// entry id ("1700000000000-0") or its milliseconds alone is an ID, and so is any other
// word (a list delivery's origin id, "35dff2cf1947:1").
func ParseFindQuery(s string) (FindQuery, error) {
	s = strings.TrimSpace(s)
	if name, value, ok := strings.Cut(s, "="); ok {
		if name = strings.TrimSpace(name); name == "" {
			return FindQuery{}, fmt.Errorf("admin: find %q: no header name before =", s)
		}
		return FindQuery{Header: name, Value: strings.TrimSpace(value)}, nil
	}
	if entryIDRe.MatchString(s) {
		return FindQuery{ID: s}, nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return FindQuery{ID: s + "-0"}, nil
	}
	if s != "" && !strings.ContainsAny(s, " \t\r\n") {
		return FindQuery{ID: s}, nil // an origin id of a list's delivery ("35dff2cf1947:1")
	}
	return FindQuery{}, fmt.Errorf("admin: find %q: give an entry id (<ms>-<seq>), an origin id, or a header as name=value", s)
}

// String is the query as ParseFindQuery reads it.
func (q FindQuery) String() string {
	if q.Header != "" {
		return q.Header + "=" + q.Value
	}
	return q.ID
}

// PlaceKind says what a Place is.
type PlaceKind string

// The places a message's copies can be in.
const (
	// PlaceWaiting is an entry of the source the group has not read yet.
	PlaceWaiting PlaceKind = "waiting"
	// PlacePending is an entry delivered to a consumer and not settled yet.
	PlacePending PlaceKind = "pending"
	// PlaceSettled is an entry of the source delivered and settled: acked, or copied on
	// (a retry copy, a parked copy or a dead letter then holds the message). Streams keep
	// their entries until trimmed.
	PlaceSettled PlaceKind = "settled"
	// PlaceInStream is an entry of a stream searched without its group.
	PlaceInStream PlaceKind = "in-stream"
	// PlaceDelayed is a retry copy parked in a delay set until it is due.
	PlaceDelayed PlaceKind = "delayed"
	// PlaceDead is a dead letter.
	PlaceDead PlaceKind = "dead-letter"
	// PlaceReply is a reply to one of the message's deliveries.
	PlaceReply PlaceKind = "reply"
)

// Place is where one copy of a message is, as Inspector.Find found it.
type Place struct {
	// Consumer holds a pending entry.
	Consumer string
	// Deliveries is how many times a pending entry was delivered.
	Deliveries int64
	// Due is when a delayed copy is due.
	Due time.Time
	// Error is a dead letter's last error.
	Error string
	// ID is the entry's id, a delayed member's handle, or a list item's index.
	ID string
	// Idle is how long a pending entry has gone untouched.
	Idle time.Duration
	// Key is the stream, delay set or dead-letter stream it is in.
	Key string
	// Kind is what it is.
	Kind PlaceKind
	// Mount is the FindScope.Mount of the key.
	Mount string
	// OriginID is the id of the message's first delivery (settle.HeaderOriginID, or the
	// entry's own id where it carries none).
	OriginID string
	// Reason is a dead letter's reason.
	Reason string
	// ReplayedFrom is, for a copy an operator replayed, the dead letter it came from
	// ("<dead-letter key>/<id>", HeaderReplayedFrom).
	ReplayedFrom string
	// ReplyOf is, for a reply, the id of the delivery it answers.
	ReplyOf string
	// RetryCount is the copy's retry count (settle.HeaderRetryCount).
	RetryCount int
	// Time is when the copy was written (its entry id's time; a delayed copy's is zero).
	Time time.Time
}

// Scanned is what Find read of one key.
type Scanned struct {
	// Complete reports that the key's whole range was read: false when the Scan bound
	// stopped the read, and the key holds more past Through.
	Complete bool
	// From is where the read started ("-": the first entry).
	From string
	// Key is the key read.
	Key string
	// Read is how many entries (or members) were read.
	Read int
	// Role is "stream", "list", "dead letter", "dead-letter list", "delay set" or
	// "replies".
	Role string
	// Through is the last entry id read ("" when none was); for a delay set, the due
	// time of the last member read; for a list, the index of the last item read.
	Through string
	// Total is how many the key holds (XLEN, ZCARD).
	Total int64
}

// Found is the answer of Inspector.Find.
type Found struct {
	// Limited reports that more places matched than Query.Limit: Places holds the first.
	Limited bool
	// Now is the server's time of the search.
	Now time.Time
	// Origins are the origin ids of the messages found.
	Origins []string
	// Places are where the copies are, by scope, then role, then id.
	Places []Place
	// Query is the query as run, its defaults filled in.
	Query FindQuery
	// Scanned says what was read of each key.
	Scanned []Scanned
}

// findFields are the fields Find reads of each entry (never the payload).
var findFields = []string{
	settle.HeaderOriginID, settle.HeaderRetryCount, settle.HeaderDeadReason, settle.HeaderDeadError,
	settle.HeaderDeadID, HeaderReplayedFrom, settle.HeaderReplyOf,
}

// findEntry is one entry (or member) read by Find, with the role of its key.
type findEntry struct {
	headers map[string]string
	id      string
	key     string
	member  *DelayedMember // a delay set's
	role    string
	scope   int
}

// origin is the id of e's message's first delivery: its origin header; for a dead
// letter without one (an operator dead-lettered a first delivery), the id it had; for
// a reply, none (a reply is linked by the delivery it answers).
func (e findEntry) origin() string {
	if o := e.headers[settle.HeaderOriginID]; o != "" {
		return o
	}
	switch e.role {
	case "dead letter", "dead-letter list":
		if o := e.headers[settle.HeaderDeadID]; o != "" {
			return o
		}
	case "replies", "list":
		return ""
	}
	if e.role == "dead-letter list" {
		return "" // an index is no id
	}
	return e.id
}

// Find answers "where is this message?": it reads the keys of scopes (each stream,
// dead-letter stream and reply stream from q.Since to q.Until, each delay set earliest
// due first, at most q.Scan of each, never a payload) and returns every copy of the
// messages q selects: waiting in the source, pending at a consumer (idle for how long,
// delivered how often), settled, parked in a delay set (due when), dead-lettered (why),
// replayed back (from which dead letter) and replied to. Copies are linked by their
// origin id (settle.HeaderOriginID); a replayed copy, which carries none, by the dead
// letter it names (HeaderReplayedFrom), and a reply by the delivery it answers
// (settle.HeaderReplyOf). The answer says what range of each key was read and whether
// the bound stopped the read: a message whose copies lie past it is not found whole.
// A key of the wrong type is an error naming it.
func (i *Inspector) Find(ctx context.Context, scopes []FindScope, q FindQuery) (*Found, error) {
	switch {
	case (q.ID == "") == (q.Header == ""):
		return nil, errors.New("admin: find: give an id or a header, one of them")
	case strings.ContainsAny(q.ID, " \t\r\n"):
		return nil, fmt.Errorf("admin: find: %q is not an id (an entry id, <ms>-<seq>, or a list delivery's origin id)", q.ID)
	case q.Limit < 0 || q.Scan < 0:
		return nil, fmt.Errorf("admin: find: Limit %d and Scan %d must not be negative", q.Limit, q.Scan)
	case !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since):
		return nil, fmt.Errorf("admin: find: Until %s is before Since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	if q.Limit == 0 {
		q.Limit = DefaultFindLimit
	}
	if q.Scan == 0 {
		q.Scan = DefaultFindScan
	}
	now, err := i.now(ctx)
	if err != nil {
		return nil, err
	}
	res := &Found{Now: now}
	seeds := map[string]bool{}
	if q.ID != "" {
		origin, err := i.originOf(ctx, scopes, q.ID)
		if err != nil {
			return nil, err
		}
		seeds[origin] = true
		if q.Since.IsZero() {
			q.Since = IDTime(origin) // zero for a list delivery's id: then as for a header
		}
	}
	if q.Since.IsZero() {
		q.Since = now.Add(-DefaultFindWindow)
	}
	res.Query = q
	entries, err := i.findRead(ctx, scopes, q, res)
	if err != nil {
		return nil, err
	}
	matched := map[string]bool{}
	if q.Header != "" {
		for _, e := range entries {
			if v, ok := e.headers[q.Header]; ok && v == q.Value {
				matched[e.key+"\x00"+e.id] = true // an item of a list may have no origin
				if o := e.origin(); o != "" {
					seeds[o] = true
				}
			}
		}
	}
	linkCopies(entries, seeds, matched)
	groups := map[string]*redis.XInfoGroup{}
	for o := range seeds {
		res.Origins = append(res.Origins, o)
	}
	slices.Sort(res.Origins)
	for _, e := range entries {
		if !matched[e.key+"\x00"+e.id] {
			continue
		}
		if len(res.Places) == q.Limit {
			res.Limited = true
			break
		}
		p, err := i.placeOf(ctx, scopes[e.scope], e, groups)
		if err != nil {
			return nil, err
		}
		res.Places = append(res.Places, p)
	}
	return res, nil
}

// linkCopies adds to matched the entries (by key and id) that belong to the messages
// whose origin ids seeds holds, or to those matched holds already, adding to seeds the
// origins it meets on the way: a replayed copy of a matched dead letter starts a chain
// of its own.
func linkCopies(entries []findEntry, seeds, matched map[string]bool) {
	done := map[string]bool{} // entries whose ids and origins are taken in
	ids := map[string]bool{}  // every id of a matched copy
	dead := map[string]bool{} // "<key>/<id>" of each matched dead letter
	for changed := true; changed; {
		changed = false
		for _, e := range entries {
			k := e.key + "\x00" + e.id
			if done[k] {
				continue
			}
			rf := e.headers[HeaderReplayedFrom]
			o := e.origin()
			ok := matched[k] || (o != "" && seeds[o]) ||
				(rf != "" && dead[rf]) ||
				(e.role == "replies" && ids[e.headers[settle.HeaderReplyOf]])
			if !ok {
				continue
			}
			matched[k], done[k], changed = true, true, true
			if e.role != "list" && e.role != "dead-letter list" {
				ids[e.id] = true // an index is no id a reply answers
			}
			if e.role == "dead letter" || e.role == "dead-letter list" {
				dead[e.key+"/"+e.id] = true
			}
			if o != "" && (rf != "" || e.role == "stream") {
				seeds[o] = true
			}
		}
	}
}

// originOf returns the origin id of the message of which id is a copy: the origin
// header of the entry id of a scope's stream, dead letter or replies, or id itself
// (an origin id, or an entry trimmed since).
func (i *Inspector) originOf(ctx context.Context, scopes []FindScope, id string) (string, error) {
	if !entryIDRe.MatchString(id) {
		return id, nil // no stream entry's id: an origin id as it is
	}
	for _, key := range scopeKeys(scopes) {
		if key.role == "delay set" || key.role == "list" || key.role == "dead-letter list" {
			continue
		}
		if err := i.mustBe(ctx, key.key, "stream", key.role, true); err != nil {
			return "", err
		}
		ces, err := i.xrangeCut(ctx, key.key, id, id, 1, summaryCut, false, settle.HeaderOriginID)
		if err != nil {
			return "", fmt.Errorf("admin: find: %s %q: %w", key.role, key.key, err)
		}
		if len(ces) == 1 {
			if o, _ := ces[0].msg.Values[settle.HeaderOriginID].(string); o != "" {
				return o, nil
			}
			return id, nil
		}
	}
	return id, nil
}

// scopeKey is one key of the scopes, with its role and its first scope.
type scopeKey struct {
	key   string
	role  string
	scope int
}

// scopeKeys lists the keys of scopes, each once: streams, then dead letters, delay
// sets and replies.
func scopeKeys(scopes []FindScope) []scopeKey {
	seen := map[string]bool{}
	var out []scopeKey
	add := func(key, role string, scope int) {
		if key != "" && !seen[key] {
			seen[key] = true
			out = append(out, scopeKey{key, role, scope})
		}
	}
	for k, s := range scopes {
		add(s.Stream, "stream", k)
		add(s.List, "list", k)
	}
	for k, s := range scopes {
		add(s.DeadLetter, "dead letter", k)
		add(s.DeadLetterList, "dead-letter list", k)
		add(s.Delayed, "delay set", k)
		for _, r := range s.Replies {
			add(r, "replies", k)
		}
	}
	return out
}

// findRead reads every key of scopes within q's bounds, recording what it read in res.
func (i *Inspector) findRead(ctx context.Context, scopes []FindScope, q FindQuery, res *Found) ([]findEntry, error) {
	fields := findFields
	if q.Header != "" {
		fields = append(slices.Clone(findFields), q.Header)
	}
	var out []findEntry
	for _, k := range scopeKeys(scopes) {
		var sc Scanned
		var err error
		switch k.role {
		case "delay set":
			sc, err = i.findMembers(ctx, k, q.Scan, &out)
		case "list", "dead-letter list":
			sc, err = i.findItems(ctx, k, q.Scan, &out)
		default:
			sc, err = i.findEntries(ctx, k, q, fields, &out)
		}
		if err != nil {
			return nil, err
		}
		res.Scanned = append(res.Scanned, sc)
	}
	return out, nil
}

// findEntries reads the stream k from q.Since to q.Until, at most q.Scan entries, only
// fields of each (cut to summaryCut bytes, in Redis).
func (i *Inspector) findEntries(ctx context.Context, k scopeKey, q FindQuery, fields []string, out *[]findEntry) (Scanned, error) {
	sc := Scanned{Key: k.key, Role: k.role, From: "-"}
	if err := i.mustBe(ctx, k.key, "stream", k.role, true); err != nil {
		return sc, err
	}
	start, end := streamRange(Filter{Since: q.Since, Until: q.Until})
	sc.From = start
	var err error
	if sc.Total, err = i.rdb.XLen(ctx, k.key).Result(); err != nil {
		return sc, fmt.Errorf("admin: find: %s %q: xlen: %w", k.role, k.key, err)
	}
	for sc.Read < q.Scan {
		count := int64(min(scanPage, q.Scan-sc.Read))
		ces, err := i.xrangeCut(ctx, k.key, start, end, count, summaryCut, false, fields...)
		if err != nil {
			return sc, fmt.Errorf("admin: find: %s %q: xrange %s %s: %w", k.role, k.key, start, end, err)
		}
		for _, ce := range ces {
			e := entryOf(k.key, ce.msg)
			*out = append(*out, findEntry{headers: e.Headers, id: ce.msg.ID, key: k.key, role: k.role, scope: k.scope})
		}
		sc.Read += len(ces)
		if len(ces) > 0 {
			sc.Through = ces[len(ces)-1].msg.ID
			start = "(" + sc.Through
		}
		if int64(len(ces)) < count {
			sc.Complete = true
			return sc, nil
		}
	}
	// The bound is reached: complete only if nothing lies past the last entry read.
	more, err := i.rdb.XRangeN(ctx, k.key, start, end, 1).Result()
	if err != nil {
		return sc, fmt.Errorf("admin: find: %s %q: xrange %s %s: %w", k.role, k.key, start, end, err)
	}
	sc.Complete = len(more) == 0
	return sc, nil
}

// findItems reads the list k from its head, a page at a time, at most scan items and
// about findMemberBytes of them: each item is an envelope of headers and payload.
func (i *Inspector) findItems(ctx context.Context, k scopeKey, scan int, out *[]findEntry) (Scanned, error) {
	sc := Scanned{Key: k.key, Role: k.role, From: "0"}
	if err := i.mustBe(ctx, k.key, "list", k.role, true); err != nil {
		return sc, err
	}
	var err error
	if sc.Total, err = i.rdb.LLen(ctx, k.key).Result(); err != nil {
		return sc, fmt.Errorf("admin: find: %s %q: llen: %w", k.role, k.key, err)
	}
	bytes := 0
	for sc.Read < scan && bytes < findMemberBytes {
		want := min(scanPage, scan-sc.Read)
		start := int64(sc.Read)
		items, err := i.rdb.LRange(ctx, k.key, start, start+int64(want)-1).Result()
		if err != nil {
			return sc, fmt.Errorf("admin: find: %s %q: lrange: %w", k.role, k.key, err)
		}
		for n, item := range items {
			bytes += len(item)
			d := listDeadLetterOf(k.key, start+int64(n), item)
			*out = append(*out, findEntry{headers: d.Headers, id: d.ID, key: k.key, role: k.role, scope: k.scope})
		}
		sc.Read += len(items)
		if len(items) > 0 {
			sc.Through = strconv.Itoa(sc.Read - 1)
		}
		if len(items) < want {
			break // the end of the list
		}
	}
	sc.Complete = int64(sc.Read) >= sc.Total
	return sc, nil
}

// findMemberBytes bounds the bytes of members Find reads of one delay set: a member
// holds its whole payload, so a set of large ones is read only so far (Scanned says so).
const findMemberBytes = 32 << 20

// findMembers reads the delay set k, earliest due first, a page at a time, at most scan
// members and about findMemberBytes of them.
func (i *Inspector) findMembers(ctx context.Context, k scopeKey, scan int, out *[]findEntry) (Scanned, error) {
	sc := Scanned{Key: k.key, Role: k.role, From: "-"}
	if err := i.mustBe(ctx, k.key, "zset", k.role, true); err != nil {
		return sc, err
	}
	var err error
	if sc.Total, err = i.rdb.ZCard(ctx, k.key).Result(); err != nil {
		return sc, fmt.Errorf("admin: find: delay set %q: zcard: %w", k.key, err)
	}
	bytes := 0
	for sc.Read < scan && bytes < findMemberBytes {
		want := min(scanPage, scan-sc.Read)
		page, err := i.DelayedPage(ctx, k.key, int64(sc.Read), int64(want))
		if err != nil {
			return sc, err
		}
		for n := range page {
			m := &page[n]
			bytes += len(m.Member)
			m.Payload, m.Member = nil, "" // Find shows where, not what
			*out = append(*out, findEntry{headers: m.Headers, id: m.Handle, key: k.key, role: k.role, scope: k.scope, member: m})
			sc.Through = m.Due.UTC().Format(time.RFC3339Nano)
		}
		sc.Read += len(page)
		if len(page) < want {
			break // the end of the set
		}
	}
	sc.Complete = int64(sc.Read) >= sc.Total
	return sc, nil
}

// placeOf is where the entry e, found in scope s, is: for an entry of the scope's
// stream, its state in the group (one XPENDING; groups caches each stream's group).
func (i *Inspector) placeOf(ctx context.Context, s FindScope, e findEntry, groups map[string]*redis.XInfoGroup) (Place, error) {
	p := Place{
		ID: e.id, Key: e.key, Mount: s.Mount, OriginID: e.origin(), RetryCount: retryCount(e.headers),
		ReplayedFrom: e.headers[HeaderReplayedFrom], Time: IDTime(e.id),
	}
	switch e.role {
	case "delay set":
		p.Kind, p.Due, p.Time = PlaceDelayed, e.member.Due, time.Time{}
	case "dead letter":
		p.Kind, p.Reason, p.Error = PlaceDead, e.headers[settle.HeaderDeadReason], e.headers[settle.HeaderDeadError]
	case "dead-letter list":
		p.Kind, p.Reason, p.Error = PlaceDead, e.headers[settle.HeaderDeadReason], e.headers[settle.HeaderDeadError]
		p.Time, _ = time.Parse(time.RFC3339, e.headers[settle.HeaderDeadAt])
	case "list":
		p.Kind, p.Time = PlaceWaiting, time.Time{}
	case "replies":
		p.Kind, p.ReplyOf = PlaceReply, e.headers[settle.HeaderReplyOf]
	default:
		return p, i.streamState(ctx, s, &p, groups)
	}
	return p, nil
}

// streamState tells whether p, an entry of s's stream, waits, is pending or is settled
// in s's group (groups caches the group of each stream read, nil: none).
func (i *Inspector) streamState(ctx context.Context, s FindScope, p *Place, groups map[string]*redis.XInfoGroup) error {
	if s.Group == "" || p.Key != s.Stream {
		p.Kind = PlaceInStream
		return nil
	}
	g, ok := groups[s.Stream]
	if !ok {
		info, err := i.groupInfo(ctx, s.Stream, s.Group)
		switch {
		case err == nil:
			g = &info
		case !errors.Is(err, ErrGroupNotFound):
			return err
		}
		groups[s.Stream] = g
	}
	if g == nil {
		p.Kind = PlaceWaiting // no group yet: nothing was read
		return nil
	}
	ext, err := i.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.Stream, Group: s.Group, Start: p.ID, End: p.ID, Count: 1}).Result()
	if err != nil {
		return fmt.Errorf("admin: find: stream %q group %q: xpending %s: %w", s.Stream, s.Group, p.ID, err)
	}
	switch {
	case len(ext) == 1:
		p.Kind, p.Consumer, p.Idle, p.Deliveries = PlacePending, ext[0].Consumer, ext[0].Idle, ext[0].RetryCount
	case idAfter(p.ID, g.LastDeliveredID):
		p.Kind = PlaceWaiting // past what the group read
	default:
		p.Kind = PlaceSettled
	}
	return nil
}

// idAfter reports whether the entry id a comes after b.
func idAfter(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am > bm || (am == bm && as > bs)
}

// splitID is an entry id's two parts (0 for what does not parse).
func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
