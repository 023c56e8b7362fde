package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
)

// WaitBound bounds every wait for a signal in these tests; it is never slept.
const WaitBound = 10 * time.Second

// TestBlock is the stream read bound the tests use, so shutdowns are quick.
const TestBlock = 50 * time.Millisecond

// StreamBundle is one stream test's world: a Redis, the App's own client (whose
// commands are recorded), the settlements and the logs.
type StreamBundle struct {
	Cmds   *CmdRecorder
	Client *redis.Client // the App's client: its commands are recorded
	DLQ    string
	Group  string
	In     string
	Logs   *logtest.Sink
	R      *redistest.Redis
	Rec    *Recorder
}

// SetupStream returns a StreamBundle on t's own Redis.
func SetupStream(t *testing.T) *StreamBundle {
	t.Helper()
	r := redistest.New(t)
	b := &StreamBundle{
		Cmds:  &CmdRecorder{wake: make(chan struct{})},
		DLQ:   r.Key("dlq"),
		Group: "workers",
		In:    r.Key("in"),
		Logs:  logtest.New(),
		R:     r,
		Rec:   NewRecorder(),
	}
	// A client of its own (sharing the test client's Options would share its
	// internal state): its commands are recorded.
	o := r.Client.Options()
	b.Client = redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username})
	b.Client.AddHook(b.Cmds)
	t.Cleanup(func() { _ = b.Client.Close() })
	return b
}

// Config is the App configuration the bundle records with.
func (b *StreamBundle) Config() settle.Config {
	return settle.Config{Logger: slog.New(b.Logs), OnSettled: b.Rec.OnSettled}
}

// Stream returns the bundle's stream source on the App's client, with TestBlock.
func (b *StreamBundle) Stream(opts ...settle.StreamOption) *settle.StreamSource {
	return settle.Stream(b.Client, b.In, b.Group, append([]settle.StreamOption{settle.Block(TestBlock)}, opts...)...)
}

// App returns an App with the bundle's config and one mount.
func (b *StreamBundle) App(t *testing.T, src settle.Source, h settle.Handler, opts ...settle.MountOption) *settle.App {
	t.Helper()
	app, err := settle.New(b.Config())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	app.Mount(src, h, opts...)
	return app
}

// XAdd appends an entry with the given field/value pairs with the test's own client.
func (b *StreamBundle) XAdd(t *testing.T, key string, values ...any) string {
	t.Helper()
	id, err := b.R.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: values}).Result()
	if err != nil {
		t.Fatalf("xadd %s: %v", key, err)
	}
	return id
}

// Publish publishes v with settle's publisher and returns the entry id.
func (b *StreamBundle) Publish(t *testing.T, v any, headers map[string]string) string {
	t.Helper()
	id, err := settle.NewPublisher(b.R.Client).Publish(context.Background(), b.In, v, settle.Headers(headers))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return id
}

// Pending returns how many entries of the bundle's group are pending.
func (b *StreamBundle) Pending(t *testing.T) int64 {
	t.Helper()
	p, err := b.R.Client.XPending(context.Background(), b.In, b.Group).Result()
	if err != nil {
		t.Fatalf("xpending: %v", err)
	}
	return p.Count
}

// Entries returns every entry of key.
func (b *StreamBundle) Entries(t *testing.T, key string) []redis.XMessage {
	t.Helper()
	msgs, err := b.R.Client.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("xrange %s: %v", key, err)
	}
	return msgs
}

// RunApp is StartApp whose cleanup also fails the test when Run returned an error.
func RunApp(t *testing.T, app *settle.App) (stop func() error) {
	t.Helper()
	stop = StartApp(t, app)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

// WaitFinals waits until n settlements have put messages in a final state.
func WaitFinals(t *testing.T, rec *Recorder, n int) []settle.Settled {
	t.Helper()
	return rec.WaitFor(t, WaitBound, fmt.Sprintf("%d final settlements", n), func(evs []settle.Settled) bool {
		return Finals(evs) >= n
	})
}

// FinalIDs returns the ids of the final settlements, in order.
func FinalIDs(evs []settle.Settled) []string {
	var ids []string
	for _, e := range evs {
		if e.Final() {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// Ack is a handler that acks everything.
var Ack = settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })

// CmdRecorder is a go-redis hook that records every command a client sent and its
// error, so tests can wait for one and read its arguments.
type CmdRecorder struct {
	mu   sync.Mutex
	cmds []RecordedCmd
	wake chan struct{}
}

// RecordedCmd is one command a CmdRecorder recorded: its arguments and its error.
type RecordedCmd struct {
	Args []any
	Err  error
}

// Name is the command's name, in lower case.
func (c RecordedCmd) Name() string { return strings.ToLower(fmt.Sprint(c.Args[0])) }

// Arg returns the argument after the (case-insensitive) word w, or "".
func (c RecordedCmd) Arg(w string) string {
	for i := 0; i+1 < len(c.Args); i++ {
		if strings.EqualFold(fmt.Sprint(c.Args[i]), w) {
			return fmt.Sprint(c.Args[i+1])
		}
	}
	return ""
}

// record keeps cmd and err (go-redis sets cmd.Err only after the hooks return).
func (r *CmdRecorder) record(cmd redis.Cmder, err error) {
	r.mu.Lock()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	r.cmds = append(r.cmds, RecordedCmd{Args: cmd.Args(), Err: err})
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

func (r *CmdRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *CmdRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.record(cmd, err)
		return err
	}
}

func (r *CmdRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.record(c, c.Err())
		}
		return err
	}
}

// Named returns the recorded commands called name.
func (r *CmdRecorder) Named(name string) []RecordedCmd {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RecordedCmd
	for _, c := range r.cmds {
		if c.Name() == name {
			out = append(out, c)
		}
	}
	return out
}

// WaitN waits until n recorded commands satisfy cond.
func (r *CmdRecorder) WaitN(t *testing.T, what string, n int, cond func(RecordedCmd) bool) {
	t.Helper()
	deadline := time.NewTimer(WaitBound)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		wake, k := r.wake, 0
		for _, c := range r.cmds {
			if cond(c) {
				k++
			}
		}
		r.mu.Unlock()
		if k >= n {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", WaitBound, what)
		}
	}
}

// WaitFor waits until a recorded command satisfies cond and returns it.
func (r *CmdRecorder) WaitFor(t *testing.T, what string, cond func(RecordedCmd) bool) RecordedCmd {
	t.Helper()
	deadline := time.NewTimer(WaitBound)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		wake := r.wake
		for _, c := range r.cmds {
			if cond(c) {
				r.mu.Unlock()
				return c
			}
		}
		r.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", WaitBound, what)
		}
	}
}
