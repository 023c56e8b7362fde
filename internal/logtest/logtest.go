// Package logtest is the tests' one log recorder: a slog.Handler that keeps every
// record (with the attributes a logger was given by With), counts them, finds them by
// message, and signals the first record with a watched message.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Sink is a slog.Handler that keeps every record and signals the first record whose
// message contains a watched text. The handlers WithAttrs returns share its records.
type Sink struct {
	attrs []slog.Attr // given by WithAttrs, before each record's own
	st    *store
}

type store struct {
	mu      sync.Mutex
	recs    []slog.Record // each with its handler's attributes first
	watches map[string]chan struct{}
}

// Line is one record kept, its attributes flattened to strings (a later attribute of
// the same key wins).
type Line struct {
	Attrs map[string]string
	Level slog.Level
	Msg   string
}

// New returns a Sink watching for records whose message contains one of watch.
func New(watch ...string) *Sink {
	s := &Sink{st: &store{watches: map[string]chan struct{}{}}}
	for _, w := range watch {
		s.st.watches[w] = make(chan struct{})
	}
	return s
}

// Logger returns a logger writing to s.
func (s *Sink) Logger() *slog.Logger { return slog.New(s) }

// Seen returns a channel closed once a record containing text (given to New) is
// logged.
func (s *Sink) Seen(text string) <-chan struct{} { return s.st.watches[text] }

// Count counts records at level whose message contains text.
func (s *Sink) Count(level slog.Level, text string) int {
	n := 0
	for _, r := range s.Records() {
		if r.Level == level && strings.Contains(r.Message, text) {
			n++
		}
	}
	return n
}

// Attr returns the value of attribute key in the last record whose message contains text.
func (s *Sink) Attr(text, key string) (slog.Value, bool) {
	recs := s.Records()
	for i := len(recs) - 1; i >= 0; i-- {
		if !strings.Contains(recs[i].Message, text) {
			continue
		}
		var v slog.Value
		found := false
		recs[i].Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

// Containing returns the records whose message contains text, in order.
func (s *Sink) Containing(text string) []Line {
	var out []Line
	for _, r := range s.Records() {
		if !strings.Contains(r.Message, text) {
			continue
		}
		l := Line{Attrs: map[string]string{}, Level: r.Level, Msg: r.Message}
		r.Attrs(func(a slog.Attr) bool {
			l.Attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, l)
	}
	return out
}

// Records returns the records kept so far, in order.
func (s *Sink) Records() []slog.Record {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return append([]slog.Record(nil), s.st.recs...)
}

// Enabled is true: a Sink keeps every record.
func (s *Sink) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r and signals the watches r's message contains.
func (s *Sink) Handle(_ context.Context, r slog.Record) error {
	kept := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	kept.AddAttrs(s.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		kept.AddAttrs(a)
		return true
	})
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.recs = append(s.st.recs, kept)
	for w, ch := range s.st.watches {
		if strings.Contains(r.Message, w) {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}
	return nil
}

// WithAttrs returns a handler that keeps its records in s, with attrs.
func (s *Sink) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Sink{attrs: append(s.attrs[:len(s.attrs):len(s.attrs)], attrs...), st: s.st}
}

// WithGroup returns s: a Sink keeps records ungrouped.
func (s *Sink) WithGroup(string) slog.Handler { return s }
