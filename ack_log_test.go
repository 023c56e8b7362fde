package settle_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/settlekit/settle"
)

// syncBuffer is a bytes.Buffer safe for the App's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The engine skips building an ack's log attributes when the logger would drop them:
// the debug line must still be written when debug is enabled, and only then.
func TestAckIsLoggedAtDebugOnlyWhenDebugIsEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  bool
	}{
		{name: "DebugEnabled", level: slog.LevelDebug, want: true},
		{name: "InfoLevel", level: slog.LevelInfo, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupStream(t)
			id := b.publish(t, "hello", nil)
			var out syncBuffer
			cfg := b.config()
			cfg.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tc.level}))
			app, err := settle.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(b.stream(), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
			stop := start(t, app)
			finals(t, b.rec, 1)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			logged := out.String()
			got := strings.Contains(logged, `msg="settle: ack"`) && strings.Contains(logged, "msg_id="+id)
			if got != tc.want {
				t.Fatalf("ack logged with id %s = %v, want %v; log:\n%s", id, got, tc.want, logged)
			}
		})
	}
}
