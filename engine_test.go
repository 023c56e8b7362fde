package settle_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// An App started while its Redis cannot be reached logs it and opens its source once the
// server answers, without help: it does not give up at startup.
func TestRunWaitsForAnUnreachableServerAndOpensOnceItAnswers(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there until the server starts below

	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	logs, rec := newLogRecorder(), sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(logs), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(client, "late:in", "g", settle.Block(testBlock)), ack)
	stop := start(t, app)

	for deadline := time.Now().Add(waitBound); len(logs.containing("open failed")) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failed open was logged twice while the server was down")
		}
	}
	srv := miniredis.NewMiniRedis()
	if err := srv.StartAddr(addr); err != nil {
		t.Fatalf("start miniredis on %s: %v", addr, err)
	}
	t.Cleanup(srv.Close)
	if err := client.XAdd(context.Background(), &redis.XAddArgs{Stream: "late:in", Values: []any{"payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitBound, "the entry acked", func(evs []settle.Settled) bool {
		return len(evs) == 1 && evs[0].Action == settle.ActionAck && evs[0].Err == nil
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// An error the server answers with (here a key of the wrong type) is not waited out:
// Run returns it at once.
func TestRunReturnsAnOpenErrorTheServerAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	if err := b.r.Client.Set(context.Background(), b.in, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	app := b.app(t, b.stream(), ack)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	err := app.Run(ctx)
	if err == nil || ctx.Err() != nil || len(b.logs.containing("open failed")) != 0 {
		t.Fatalf("Run = %v (ctx %v), want the WRONGTYPE open error at once, not retried", err, ctx.Err())
	}
}

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
