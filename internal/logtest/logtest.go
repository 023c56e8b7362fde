// Package logtest is the tests' one log recorder: a slog.Handler that keeps every
// record, counts them and signals the first record with a watched message.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Sink is a slog.Handler that keeps every record and signals the first record whose
// message contains a watched text.
type Sink struct {
	mu      sync.Mutex
	recs    []slog.Record
	watches map[string]chan struct{}
}

// New returns a Sink watching for records whose message contains one of watch.
func New(watch ...string) *Sink {
	s := &Sink{watches: map[string]chan struct{}{}}
	for _, w := range watch {
		s.watches[w] = make(chan struct{})
	}
	return s
}

// Logger returns a logger writing to s.
func (s *Sink) Logger() *slog.Logger { return slog.New(s) }

// Seen returns a channel closed once a record containing text (given to New) is
// logged.
func (s *Sink) Seen(text string) <-chan struct{} { return s.watches[text] }

// Count counts records at level whose message contains text.
func (s *Sink) Count(level slog.Level, text string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if r.Level == level && strings.Contains(r.Message, text) {
			n++
		}
	}
	return n
}

// Attr returns the value of attribute key in the last record whose message contains text.
func (s *Sink) Attr(text, key string) (slog.Value, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.recs) - 1; i >= 0; i-- {
		if !strings.Contains(s.recs[i].Message, text) {
			continue
		}
		var v slog.Value
		found := false
		s.recs[i].Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

// Records returns the records kept so far, in order.
func (s *Sink) Records() []slog.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]slog.Record(nil), s.recs...)
}

// Enabled is true: a Sink keeps every record.
func (s *Sink) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r and signals the watches r's message contains.
func (s *Sink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r.Clone())
	for w, ch := range s.watches {
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

// WithAttrs and WithGroup return s: a Sink keeps records as logged.
func (s *Sink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *Sink) WithGroup(string) slog.Handler      { return s }
