package sourcetest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// logWatch records the messages an App logs at Info and above, whatever level its own
// Logger keeps, so that a scenario can wait for a line as a signal (the mount saw its
// pause) instead of sleeping.
type logWatch struct {
	mu   sync.Mutex
	seen map[string]int
	wake chan struct{}
}

func newLogWatch() *logWatch {
	return &logWatch{seen: map[string]int{}, wake: make(chan struct{})}
}

// handler returns a slog.Handler that records each message, then hands the record to
// next when next keeps its level.
func (w *logWatch) handler(next slog.Handler) slog.Handler { return &watchHandler{next: next, w: w} }

// count returns how many times msg was logged.
func (w *logWatch) count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[msg]
}

// waitN waits until msg was logged n times, calling nudge (when not nil) every few
// milliseconds while it waits.
func (w *logWatch) waitN(t testing.TB, msg string, n int, nudge func()) {
	t.Helper()
	waitSignal(t, waitTimeout, nudge, func() (bool, <-chan struct{}) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.seen[msg] >= n, w.wake
	}, func() {
		t.Fatalf("timed out after %s waiting for the log line %q (seen %d times, want %d)", waitTimeout, msg, w.count(msg), n)
	})
}

type watchHandler struct {
	next slog.Handler
	w    *logWatch
}

func (h *watchHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *watchHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		h.w.mu.Lock()
		h.w.seen[r.Message]++
		close(h.w.wake)
		h.w.wake = make(chan struct{})
		h.w.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *watchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &watchHandler{next: h.next.WithAttrs(as), w: h.w}
}

func (h *watchHandler) WithGroup(name string) slog.Handler {
	return &watchHandler{next: h.next.WithGroup(name), w: h.w}
}
