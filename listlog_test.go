package settle_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logSink is a slog.Handler that keeps every record and signals the first record whose
// message contains a watched text.
type logSink struct {
	mu      sync.Mutex
	recs    []slog.Record
	watches map[string]chan struct{}
}

func newLogSink(watch ...string) *logSink {
	s := &logSink{watches: map[string]chan struct{}{}}
	for _, w := range watch {
		s.watches[w] = make(chan struct{})
	}
	return s
}

// Logger returns a logger writing to s.
func (s *logSink) Logger() *slog.Logger { return slog.New(s) }

// Seen returns a channel closed once a record containing text (given to newLogSink) is
// logged.
func (s *logSink) Seen(text string) <-chan struct{} { return s.watches[text] }

// Count counts records at level whose message contains text.
func (s *logSink) Count(level slog.Level, text string) int {
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
func (s *logSink) Attr(text, key string) (slog.Value, bool) {
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

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
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

func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }
