package admin

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/wire"
)

// DeadLetter is one entry of a dead-letter stream, with the headers settle.DeadLetter
// wrote read out.
type DeadLetter struct {
	Entry
	// Error is the last error the handler returned (settle.HeaderDeadError).
	Error string
	// OriginalID is the id the message had where it was dead-lettered from
	// (settle.HeaderDeadID).
	OriginalID string
	// Reason says why it was dead-lettered (settle.HeaderDeadReason).
	Reason string
	// Source is the key it was read from (settle.HeaderDeadSource), where a replay
	// sends it back by default.
	Source string
}

// Filter selects dead letters. Its zero value selects them all; each field set narrows
// the selection (all of them must match).
type Filter struct {
	// After selects the dead letters after this one, a page's cursor: for a stream the
	// entry id of the last one of the page before (exclusive), for a list its index.
	// IDs ignore it. Defaults to "": from the first.
	After string
	// Error selects the dead letters whose last error contains this substring.
	Error string
	// Headers selects the dead letters that carry each of these headers with this value.
	Headers map[string]string
	// IDs selects these entries only. Each must be in the stream: an id that is not is
	// an error wrapping ErrEntryNotFound, and nothing is changed.
	IDs []string
	// Reason is a regular expression (RE2 syntax, unanchored) that the dead-letter reason
	// or the last error must match: the reason settle writes says how a message died
	// ("max attempts reached (5 of 5)"), the error says why, and an operator's "reason
	// unavailable" means either. The CLI's --reason and the console's Reason box are this
	// filter. One that does not compile is an error naming it.
	Reason string
	// Since selects the dead letters written at or after this time, read from their
	// entry ids (milliseconds).
	Since time.Time
	// Source selects the dead letters read from this key.
	Source string
	// Through selects the dead letters up to this one, inclusive: the newest a dry run
	// showed (see Selection). For a stream it is an entry id; for a list, the newest
	// HeaderDeadAt shown (RFC 3339), and a member without one is not held back by it.
	// Defaults to "": no bound.
	Through string
	// Until selects the dead letters written at or before this time, read from their
	// entry ids (milliseconds).
	Until time.Time

	// lenient skips an id of IDs that is gone instead of refusing: a confirmed
	// Selection, whose ids were there when it was shown.
	lenient bool
}

// matcher is a Filter with its regexp compiled.
type matcher struct {
	Filter
	reason  *regexp.Regexp
	through time.Time // a list's Through
}

func (f Filter) compile() (*matcher, error) {
	m := &matcher{Filter: f}
	if f.Reason != "" {
		re, err := regexp.Compile(f.Reason)
		if err != nil {
			return nil, fmt.Errorf("admin: filter: reason %q does not compile: %w", f.Reason, err)
		}
		m.reason = re
	}
	if f.Through != "" {
		if t, err := time.Parse(time.RFC3339Nano, f.Through); err == nil {
			m.through = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return nil, fmt.Errorf("admin: filter: Until %s is before Since %s", f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	return m, nil
}

func (m *matcher) match(d *DeadLetter) bool {
	switch {
	case m.reason != nil && !m.reason.MatchString(d.Reason) && !m.reason.MatchString(d.Error),
		!m.through.IsZero() && d.Time.After(m.through),
		m.Error != "" && !strings.Contains(d.Error, m.Error),
		m.Source != "" && d.Source != m.Source,
		!m.Since.IsZero() && d.Time.Before(m.Since.Truncate(time.Millisecond)),
		!m.Until.IsZero() && d.Time.After(m.Until):
		return false
	}
	for k, v := range m.Headers {
		if got, ok := d.Headers[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// DeadLetters returns the dead letters of the dead-letter stream key that f selects,
// oldest first, at most limit of them (limit <= 0: all).
func (i *Inspector) DeadLetters(ctx context.Context, key string, f Filter, limit int) ([]DeadLetter, error) {
	return i.deadLetters(ctx, key, f, limit, 0, 0)
}

// deadLetters is DeadLetters with each field cut to cut bytes (0: whole), reading at
// most maxRead entries (0: no bound; see ScanBoundError).
func (i *Inspector) deadLetters(ctx context.Context, key string, f Filter, limit, cut, maxRead int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := i.scan(ctx, key, f, limit, cut, maxRead, func(d DeadLetter) { out = append(out, d) })
	return out, err
}

// PageScan is how many entries DeadLetterStore.Page reads at most for one page: a
// filter that matches few of a long stream returns a short page and a
// ScanBoundError saying where to read on.
const PageScan = 10_000

// ScanBoundError reports a page cut short by PageScan: the entries read so far did not
// fill it. Next is the cursor (Filter.After) to read on from.
type ScanBoundError struct {
	// Next is the id of the last entry read.
	Next string
	// Read is how many entries were read.
	Read int
}

func (e *ScanBoundError) Error() string {
	return fmt.Sprintf("admin: a page read %d entries without filling up; read on after %s", e.Read, e.Next)
}

// scanPage is how many entries one XRANGE of a scan reads.
const scanPage = 500

// scan calls each for the dead letters of key that f selects, oldest first (for f.IDs,
// in their order, each once), at most limit (limit <= 0: all), each field cut to cut
// bytes in Redis (0: whole). Past maxRead entries read (0: no bound) it stops with a
// *ScanBoundError. It reads only.
func (i *Inspector) scan(ctx context.Context, key string, f Filter, limit, cut, maxRead int, each func(DeadLetter)) error {
	m, err := f.compile()
	if err != nil {
		return err
	}
	if err := i.mustBe(ctx, key, "stream", "dead-letter stream", false); err != nil {
		return err
	}
	n := 0
	take := func(e cutEntry) bool {
		d := deadLetterOf(key, e)
		if m.match(&d) {
			each(d)
			n++
		}
		return limit <= 0 || n < limit
	}
	if len(f.IDs) > 0 {
		return i.scanIDs(ctx, key, f.IDs, f.lenient, cut, take)
	}
	start, end := streamRange(f)
	if f.After != "" {
		start = "(" + f.After // Since still applies, in match
	}
	count := int64(scanPage)
	if limit > 0 && limit < scanPage {
		count = int64(limit) // a page: the first read fits it when every entry matches
	}
	read := 0
	for {
		if maxRead > 0 {
			if read >= maxRead {
				return &ScanBoundError{Next: strings.TrimPrefix(start, "("), Read: read}
			}
			count = min(count, int64(maxRead-read))
		}
		msgs, err := i.xrange(ctx, key, start, end, count, cut)
		if err != nil {
			return fmt.Errorf("admin: dead-letter stream %q: xrange %s %s: %w", key, start, end, err)
		}
		for _, msg := range msgs {
			if !take(msg) {
				return nil
			}
		}
		read += len(msgs)
		if int64(len(msgs)) < count {
			return nil
		}
		start, count = "("+msgs[len(msgs)-1].msg.ID, scanPage
	}
}

// xrange is XRANGE key start end COUNT count, each value cut to cut bytes in Redis (0:
// whole).
func (i *Inspector) xrange(ctx context.Context, key, start, end string, count int64, cut int) ([]cutEntry, error) {
	if cut > 0 {
		return i.xrangeCut(ctx, key, start, end, count, cut, false)
	}
	msgs, err := i.rdb.XRangeN(ctx, key, start, end, count).Result()
	out := make([]cutEntry, len(msgs))
	for k, msg := range msgs {
		out[k].msg = msg
	}
	return out, err
}

// scanIDs reads the entries ids of key, refusing (before calling take) any that is not
// there, or skipping it when lenient.
func (i *Inspector) scanIDs(ctx context.Context, key string, ids []string, lenient bool, cut int, take func(cutEntry) bool) error {
	seen := map[string]bool{}
	var msgs []cutEntry
	var missing []string
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		got, err := i.xrange(ctx, key, id, id, 1, cut)
		if err != nil {
			return fmt.Errorf("admin: dead-letter stream %q: entry %q: %w", key, id, err)
		}
		if len(got) == 0 {
			missing = append(missing, id)
			continue
		}
		msgs = append(msgs, got[0])
	}
	if len(missing) > 0 && !lenient {
		return fmt.Errorf("%w: dead-letter stream %q has no entry %s", ErrEntryNotFound, key, strings.Join(missing, ", "))
	}
	for _, msg := range msgs {
		if !take(msg) {
			break
		}
	}
	return nil
}

func deadLetterOf(key string, ce cutEntry) DeadLetter {
	e := entryOf(key, ce.msg)
	if ce.sizes != nil {
		e.Size = ce.sizes[wire.FieldPayload]
		for name, n := range ce.sizes {
			if v, _ := ce.msg.Values[name].(string); int64(len(v)) < n {
				e.Cut = true
			}
		}
	}
	return DeadLetter{
		Entry:      e,
		Error:      e.Headers[settle.HeaderDeadError],
		OriginalID: e.Headers[settle.HeaderDeadID],
		Reason:     e.Headers[settle.HeaderDeadReason],
		Source:     e.Headers[settle.HeaderDeadSource],
	}
}

func entryOf(key string, msg redis.XMessage) Entry {
	payload, ok, headers := wire.FromStream(msg.Values)
	return Entry{HasPayload: ok, Headers: headers, ID: msg.ID, Key: key, Payload: payload, Size: int64(len(payload)), Time: IDTime(msg.ID)}
}

// DeadLetterSummary is a dead-letter stream at a glance, as
// Inspector.DeadLetterSummary sees it.
type DeadLetterSummary struct {
	// ByError groups the dead letters by their last error, normalised (see
	// NormalizeError), most first.
	ByError []Group
	// ByReason groups them by reason, most first.
	ByReason []Group
	// BySource groups them by the key they were read from, most first.
	BySource []Group
	// Count is how many dead letters the filter selected.
	Count int
	// Key is the dead-letter stream's key.
	Key string
	// Newest is the id of the newest dead letter selected, "" when none was.
	Newest string
	// NewestAt is when the newest was dead-lettered (from its id).
	NewestAt time.Time
	// Oldest is the id of the oldest dead letter selected, "" when none was.
	Oldest string
	// OldestAt is when the oldest was dead-lettered (from its id).
	OldestAt time.Time
	// Sampled is, for a summary of a sample, how many of the newest dead letters it
	// read when there were more (the counts are "of the newest Sampled"); 0 when it
	// read every one the filter's range holds.
	Sampled int
	// Total is how many dead letters the key holds, filter or not (XLEN, LLEN).
	Total int64
}

// Group is the dead letters that share one value (a reason, a normalised error, a
// source).
type Group struct {
	// Count is how many share it.
	Count int
	// Example is the value as the newest of them carried it (for ByError, the error
	// before normalisation).
	Example string
	// Newest is the id of the newest of them.
	Newest string
	// Value is what they share.
	Value string
}

// DeadLetterSummary reads every dead letter of the dead-letter stream key that f
// selects (use the zero Filter for all) and counts and groups them. It reads the whole
// selection, in pages: on a very long stream, narrow it with f.Since and f.Until.
func (i *Inspector) DeadLetterSummary(ctx context.Context, key string, f Filter) (*DeadLetterSummary, error) {
	return summarize(key, func(each func(DeadLetter)) error { return i.scan(ctx, key, f, 0, summaryCut, 0, each) })
}

// DefaultSample is how many of the newest dead letters a sampled summary reads (see
// DeadLetterStore.Summary): a page of the console says "of the newest 10,000".
const DefaultSample = 10_000

// sampleSummary is DeadLetterSummary over the newest sample dead letters of the range f
// selects (one XREVRANGE COUNT sample, each field cut in Redis), plus XLEN.
func (i *Inspector) sampleSummary(ctx context.Context, key string, f Filter, sample int) (*DeadLetterSummary, error) {
	if sample <= 0 || len(f.IDs) > 0 {
		return i.DeadLetterSummary(ctx, key, f)
	}
	m, err := f.compile()
	if err != nil {
		return nil, err
	}
	if err := i.mustBe(ctx, key, "stream", "dead-letter stream", false); err != nil {
		return nil, err
	}
	start, end := streamRange(f)
	var fields []string // a summary reads the fields it groups by (and those f filters on)
	if len(f.Headers) == 0 {
		fields = []string{settle.HeaderDeadReason, settle.HeaderDeadError, settle.HeaderDeadSource, settle.HeaderDeadAt}
	}
	ces, err := i.xrangeCut(ctx, key, end, start, int64(sample), summaryCut, true, fields...)
	if err != nil {
		return nil, fmt.Errorf("admin: dead-letter stream %q: xrevrange %s %s: %w", key, end, start, err)
	}
	s, err := summarize(key, func(each func(DeadLetter)) error {
		for k := len(ces) - 1; k >= 0; k-- {
			if d := deadLetterOf(key, ces[k]); m.match(&d) {
				each(d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ces) == sample {
		s.Sampled = sample
	}
	if s.Total, err = i.rdb.XLen(ctx, key).Result(); err != nil {
		return nil, fmt.Errorf("admin: dead-letter stream %q: xlen: %w", key, err)
	}
	return s, nil
}

// streamRange is the XRANGE start and end of what f selects by time (and Through).
func streamRange(f Filter) (start, end string) {
	start, end = "-", "+"
	if !f.Since.IsZero() {
		start = strconv.FormatInt(f.Since.UnixMilli(), 10)
	}
	if !f.Until.IsZero() {
		end = strconv.FormatInt(f.Until.UnixMilli(), 10)
	}
	if f.Through != "" && (end == "+" || !IDTime(f.Through).After(f.Until)) {
		end = f.Through
	}
	return start, end
}

// summarize counts and groups the dead letters scan gives each, oldest first.
func summarize(key string, scan func(each func(DeadLetter)) error) (*DeadLetterSummary, error) {
	s := &DeadLetterSummary{Key: key}
	byReason, byError, bySource := grouper{}, grouper{}, grouper{}
	err := scan(func(d DeadLetter) {
		s.Count++
		if s.Oldest == "" {
			s.Oldest, s.OldestAt = d.ID, d.Time
		}
		s.Newest, s.NewestAt = d.ID, d.Time
		byReason.add(d.Reason, d.Reason, d.ID)
		byError.add(NormalizeError(d.Error), d.Error, d.ID)
		bySource.add(d.Source, d.Source, d.ID)
	})
	if err != nil {
		return nil, err
	}
	s.ByReason, s.ByError, s.BySource = byReason.groups(), byError.groups(), bySource.groups()
	return s, nil
}

type grouper map[string]*Group

func (g grouper) add(value, example, id string) {
	gr := g[value]
	if gr == nil {
		gr = &Group{Value: value}
		g[value] = gr
	}
	gr.Count++
	gr.Example, gr.Newest = example, id
}

// groups returns the groups, most first, then by value.
func (g grouper) groups() []Group {
	out := make([]Group, 0, len(g))
	for _, gr := range g {
		out = append(out, *gr)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Count != out[b].Count {
			return out[a].Count > out[b].Count
		}
		return out[a].Value < out[b].Value
	})
	return out
}

var (
	uuidRe  = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hex0xRe = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b`)
	hexRe   = regexp.MustCompile(`(?i)\b[0-9a-f]{8,}\b`)
	digitRe = regexp.MustCompile(`[0-9]+`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// NormalizeError returns the form of a handler's error by which dead letters are
// grouped, so that errors that differ only in the ids and numbers they name group
// together ("order 123 failed" and "order 456 failed" are both "order <n> failed"). It
// keeps the first line only (a panic's stack follows it), then replaces, in this order:
// UUIDs with "<uuid>"; 0x-prefixed hex numbers with "<hex>"; words of 8 or more hex
// digits with "<hex>" (or "<n>" when they are all decimal digits); every other run of
// decimal digits with "<n>"; and folds white space.
func NormalizeError(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s = uuidRe.ReplaceAllString(s, "<uuid>")
	s = hex0xRe.ReplaceAllString(s, "<hex>")
	s = hexRe.ReplaceAllStringFunc(s, func(w string) string {
		if strings.Trim(w, "0123456789") == "" {
			return w // all digits: the next step makes it <n>
		}
		return "<hex>"
	})
	s = digitRe.ReplaceAllString(s, "<n>")
	return strings.TrimSpace(spaceRe.ReplaceAllString(s, " "))
}
