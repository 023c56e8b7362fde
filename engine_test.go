package settle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/settletest"
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
	logs, rec := logtest.New(), sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(logs), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(client, "late:in", "g", settle.Block(sourcetest.TestBlock)), sourcetest.Ack)
	stop := sourcetest.RunApp(t, app)

	for deadline := time.Now().Add(sourcetest.WaitBound); len(logs.Containing("open failed")) < 2; time.Sleep(10 * time.Millisecond) {
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
	rec.WaitFor(t, sourcetest.WaitBound, "the entry acked", func(evs []settle.Settled) bool {
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
	b := sourcetest.SetupStream(t)
	if err := b.R.Client.Set(context.Background(), b.In, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	app := b.App(t, b.Stream(), sourcetest.Ack)
	ctx, cancel := context.WithTimeout(context.Background(), sourcetest.WaitBound)
	defer cancel()
	err := app.Run(ctx)
	if err == nil || ctx.Err() != nil || len(b.Logs.Containing("open failed")) != 0 {
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

// The engine skips building a settlement's log attributes when the logger would drop
// them: an ack's and a retry's lines are Debug, written when debug is enabled and only
// then (a retry costs no log line at the default level).
func TestAckAndRetryAreLoggedAtDebugOnlyWhenDebugIsEnabled(t *testing.T) {
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
			b := sourcetest.SetupStream(t)
			id := b.Publish(t, "hello", nil)
			var out syncBuffer
			cfg := b.Config()
			cfg.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tc.level}))
			app, err := settle.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(b.Stream(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				if m.Attempt == 1 {
					return settle.Retry(errors.New("once more"))
				}
				return nil
			}))
			stop := sourcetest.RunApp(t, app)
			sourcetest.WaitFinals(t, b.Rec, 1)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			logged := out.String()
			for _, line := range []string{`msg="settle: retry"`, "msg_key=" + id + " key=", `msg="settle: ack"`} {
				if got := strings.Contains(logged, line); got != tc.want {
					t.Fatalf("logged %q = %v, want %v; log:\n%s", line, got, tc.want, logged)
				}
			}
		})
	}
}

// A handler that runs past the mount's Timeout has its context cancelled with
// ErrHandlerTimeout and its delivery settled as a failure at once, even when it never
// returns: the retry reaches another worker, and the late return is ignored.
func TestTimeoutSettlesAHungHandlersDeliveryAsAFailure(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	mem := settletest.NewBroker().Topic("jobs")
	started, release := make(chan context.Context, 1), make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	h.Mount(mem, settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		if calls.Add(1) == 1 {
			started <- ctx
			<-release // hung: it ignores its context
			return nil
		}
		return nil
	}), settle.Timeout(time.Second), settle.Concurrency(1))
	h.Start()
	mem.Publish([]byte("p"), nil)
	ctx := <-started
	h.Advance(time.Second)
	failed := onlyAction(t, h.WaitAction(settle.ActionPark, 1), settle.ActionPark)
	if !errors.Is(failed.HandlerErr, settle.ErrHandlerTimeout) || failed.Attempt != 1 {
		t.Fatalf("settlement %+v, want attempt 1 retried with ErrHandlerTimeout", failed)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, settle.ErrHandlerTimeout) {
		t.Fatalf("the hung handler's context cause is %v, want ErrHandlerTimeout", cause)
	}
	h.Advance(time.Second) // past the backoff
	acked := onlyAction(t, h.WaitAction(settle.ActionAck, 1), settle.ActionAck)
	if acked.Attempt != 2 {
		t.Fatalf("ack %+v, want the retry at attempt 2 (on a second worker: the first is hung)", acked)
	}
}

// onlyAction returns the one event of evs with action a.
func onlyAction(t *testing.T, evs []settle.Settled, a settle.Action) settle.Settled {
	t.Helper()
	var out []settle.Settled
	for _, e := range evs {
		if e.Action == a {
			out = append(out, e)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d %s settlements, want 1: %+v", len(out), a, evs)
	}
	return out[0]
}

// A recovered panic is logged at Error with its stack, and the dead letter's error header
// carries the panic value and its stack, cut to the header's bound.
func TestPanicKeepsItsStackInTheLogAndTheDeadLetter(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelError}))
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: logger}))
	broker := settletest.NewBroker()
	mem := broker.Topic("jobs")
	h.Mount(mem, settle.HandlerFunc(func(context.Context, *settle.Message) error {
		panicDeepInAHandler()
		return nil
	}), settle.MaxAttempts(1), settle.DeadLetter("jobs.dead"))
	h.Start()
	mem.Publish([]byte("p"), nil)
	h.WaitAction(settle.ActionDeadLetter, 1)
	dead := broker.Topic("jobs.dead").Messages()
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	e := dead[0].Headers[settle.HeaderDeadError]
	if !strings.Contains(e, "handler panicked: card processor exploded") || !strings.Contains(e, "panicDeepInAHandler") || len(e) > 4096+len("…(truncated)") {
		t.Fatalf("dead letter error header %q, want the panic value and its stack within 4 KiB", e)
	}
	mu.Lock()
	defer mu.Unlock()
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "panicDeepInAHandler") {
		t.Fatalf("log %q, want an Error line with the panic's stack", l)
	}
}

//go:noinline
func panicDeepInAHandler() { panic("card processor exploded") }

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
