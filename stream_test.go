package settle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// waitBound bounds every wait for a signal in these tests; it is never slept.
const waitBound = 10 * time.Second

// testBlock is the stream read bound the tests use, so shutdowns are quick.
const testBlock = 50 * time.Millisecond

// streamBundle is one stream test's world: a Redis, the App's own client (whose
// commands are recorded), the settlements and the logs.
type streamBundle struct {
	cmds   *cmdRecorder
	client *redis.Client // the App's client: its commands are recorded
	dlq    string
	group  string
	in     string
	logs   *logRecorder
	r      *redistest.Redis
	rec    *sourcetest.Recorder
}

func setupStream(t *testing.T) *streamBundle {
	t.Helper()
	r := redistest.New(t)
	b := &streamBundle{
		cmds:  &cmdRecorder{wake: make(chan struct{})},
		dlq:   r.Key("dlq"),
		group: "workers",
		in:    r.Key("in"),
		logs:  newLogRecorder(),
		r:     r,
		rec:   sourcetest.NewRecorder(),
	}
	// A client of its own (sharing the test client's Options would share its
	// internal state): its commands are recorded.
	o := r.Client.Options()
	b.client = redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username})
	b.client.AddHook(b.cmds)
	t.Cleanup(func() { _ = b.client.Close() })
	return b
}

// config is the App configuration the bundle records with.
func (b *streamBundle) config() settle.Config {
	return settle.Config{Logger: slog.New(b.logs), OnSettled: b.rec.OnSettled}
}

// stream returns the bundle's stream source on the App's client, with testBlock.
func (b *streamBundle) stream(opts ...settle.StreamOption) *settle.StreamSource {
	return settle.Stream(b.client, b.in, b.group, append([]settle.StreamOption{settle.Block(testBlock)}, opts...)...)
}

// app returns an App with the bundle's config and one mount.
func (b *streamBundle) app(t *testing.T, src settle.Source, h settle.Handler, opts ...settle.MountOption) *settle.App {
	t.Helper()
	app, err := settle.New(b.config())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	app.Mount(src, h, opts...)
	return app
}

// xadd appends an entry with the given field/value pairs with the test's own client.
func (b *streamBundle) xadd(t *testing.T, key string, values ...any) string {
	t.Helper()
	id, err := b.r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: values}).Result()
	if err != nil {
		t.Fatalf("xadd %s: %v", key, err)
	}
	return id
}

// publish publishes v with settle's publisher and returns the entry id.
func (b *streamBundle) publish(t *testing.T, v any, headers map[string]string) string {
	t.Helper()
	id, err := settle.NewPublisher(b.r.Client).Publish(context.Background(), b.in, v, settle.Headers(headers))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return id
}

// pending returns how many entries of the bundle's group are pending.
func (b *streamBundle) pending(t *testing.T) int64 {
	t.Helper()
	p, err := b.r.Client.XPending(context.Background(), b.in, b.group).Result()
	if err != nil {
		t.Fatalf("xpending: %v", err)
	}
	return p.Count
}

// entries returns every entry of key.
func (b *streamBundle) entries(t *testing.T, key string) []redis.XMessage {
	t.Helper()
	msgs, err := b.r.Client.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("xrange %s: %v", key, err)
	}
	return msgs
}

// start runs app until stop is called or the test ends. stop cancels Run's context
// and returns what Run returned.
func start(t *testing.T, app *settle.App) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(waitBound):
				runErr = errors.New("Run did not return after its context was cancelled")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return stop
}

// finals waits until n settlements have put messages in a final state.
func finals(t *testing.T, rec *sourcetest.Recorder, n int) []settle.Settled {
	t.Helper()
	return rec.WaitFor(t, waitBound, fmt.Sprintf("%d final settlements", n), func(evs []settle.Settled) bool {
		return sourcetest.Finals(evs) >= n
	})
}

// finalIDs returns the ids of the final settlements, in order.
func finalIDs(evs []settle.Settled) []string {
	var ids []string
	for _, e := range evs {
		if e.Final() {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// ack is a handler that acks everything.
var ack = settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })

// cmdRecorder is a go-redis hook that records every command a client sent and its
// error, so tests can wait for one and read its arguments.
type cmdRecorder struct {
	mu   sync.Mutex
	cmds []recordedCmd
	wake chan struct{}
}

type recordedCmd struct {
	args []any
	err  error
}

func (c recordedCmd) name() string { return strings.ToLower(fmt.Sprint(c.args[0])) }

// arg returns the argument after the (case-insensitive) word w, or "".
func (c recordedCmd) arg(w string) string {
	for i := 0; i+1 < len(c.args); i++ {
		if strings.EqualFold(fmt.Sprint(c.args[i]), w) {
			return fmt.Sprint(c.args[i+1])
		}
	}
	return ""
}

// record keeps cmd and err (go-redis sets cmd.Err only after the hooks return).
func (r *cmdRecorder) record(cmd redis.Cmder, err error) {
	r.mu.Lock()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	r.cmds = append(r.cmds, recordedCmd{args: cmd.Args(), err: err})
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

func (r *cmdRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *cmdRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.record(cmd, err)
		return err
	}
}

func (r *cmdRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.record(c, c.Err())
		}
		return err
	}
}

// named returns the recorded commands called name.
func (r *cmdRecorder) named(name string) []recordedCmd {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recordedCmd
	for _, c := range r.cmds {
		if c.name() == name {
			out = append(out, c)
		}
	}
	return out
}

// waitN waits until n recorded commands satisfy cond.
func (r *cmdRecorder) waitN(t *testing.T, what string, n int, cond func(recordedCmd) bool) {
	t.Helper()
	deadline := time.NewTimer(waitBound)
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
			t.Fatalf("timed out after %s waiting for %s", waitBound, what)
		}
	}
}

// waitFor waits until a recorded command satisfies cond and returns it.
func (r *cmdRecorder) waitFor(t *testing.T, what string, cond func(recordedCmd) bool) recordedCmd {
	t.Helper()
	deadline := time.NewTimer(waitBound)
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
			t.Fatalf("timed out after %s waiting for %s", waitBound, what)
		}
	}
}

// logRecorder is a slog.Handler that keeps every record, with its attributes
// flattened to strings.
type logRecorder struct {
	attrs []slog.Attr
	store *logStore
}

type logStore struct {
	mu      sync.Mutex
	records []loggedRecord
}

type loggedRecord struct {
	attrs map[string]string
	level slog.Level
	msg   string
}

func newLogRecorder() *logRecorder { return &logRecorder{store: &logStore{}} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{attrs: map[string]string{}, level: r.Level, msg: r.Message}
	for _, a := range l.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	l.store.mu.Lock()
	l.store.records = append(l.store.records, rec)
	l.store.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{attrs: append(slices.Clip(l.attrs), attrs...), store: l.store}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// containing returns the records whose message contains s.
func (l *logRecorder) containing(s string) []loggedRecord {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	var out []loggedRecord
	for _, r := range l.store.records {
		if strings.Contains(r.msg, s) {
			out = append(out, r)
		}
	}
	return out
}

func TestStreamCreatesMissingGroupWithMkStream(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	app := b.app(t, b.stream(), ack)
	start(t, app)

	b.cmds.waitFor(t, "a read after Open", func(c recordedCmd) bool { return c.name() == "xreadgroup" })
	if n, err := b.r.Client.Exists(ctx, b.in).Result(); err != nil || n != 1 {
		t.Fatalf("stream %s exists = %d, %v; want the stream made by MKSTREAM", b.in, n, err)
	}
	groups, err := b.r.Client.XInfoGroups(ctx, b.in).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != b.group {
		t.Fatalf("groups = %+v, %v; want one group %q", groups, err, b.group)
	}
	id := b.publish(t, "hello", nil)
	if got := finalIDs(finals(t, b.rec, 1)); !slices.Equal(got, []string{id}) {
		t.Fatalf("settled %v, want [%s]", got, id)
	}
}

func TestStreamUsesExistingGroupAsItIs(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	b.publish(t, "old 1", nil)
	b.publish(t, "old 2", nil)
	if err := b.r.Client.XGroupCreate(ctx, b.in, b.group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	id := b.publish(t, "new", nil)
	// StartAt("0") would read the whole stream were the group created now: an existing
	// group keeps its own position.
	app := b.app(t, b.stream(settle.StartAt("0")), ack, settle.Concurrency(1))
	stop := start(t, app)

	if got := finalIDs(finals(t, b.rec, 1)); !slices.Equal(got, []string{id}) {
		t.Fatalf("settled %v, want only the entry after the group's position [%s]", got, id)
	}
	create := b.cmds.waitFor(t, "XGROUP CREATE", func(c recordedCmd) bool {
		return c.name() == "xgroup" && strings.EqualFold(fmt.Sprint(c.args[1]), "create")
	})
	if create.err == nil || !strings.HasPrefix(create.err.Error(), "BUSYGROUP") {
		t.Fatalf("XGROUP CREATE returned %v, want BUSYGROUP (the group existed)", create.err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil: BUSYGROUP is fine", err)
	}
	if got := len(b.rec.Events()); got != 1 {
		t.Fatalf("%d settlements, want 1: entries before the group's position are not read", got)
	}
}

func TestStreamStartAt(t *testing.T) {
	t.Parallel()

	t.Run("DefaultReadsWholeStream", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		old := b.publish(t, "before the group", nil)
		start(t, b.app(t, b.stream(), ack, settle.Concurrency(1)))
		b.cmds.waitFor(t, "XGROUP CREATE", func(c recordedCmd) bool { return c.name() == "xgroup" })
		late := b.publish(t, "after the group", nil)
		if got := finalIDs(finals(t, b.rec, 2)); !slices.Equal(got, []string{old, late}) {
			t.Fatalf("settled %v, want [%s %s]", got, old, late)
		}
	})

	t.Run("DollarReadsOnlyNewEntries", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		b.publish(t, "before the group", nil)
		stop := start(t, b.app(t, b.stream(settle.StartAt("$")), ack, settle.Concurrency(1)))
		b.cmds.waitFor(t, "XGROUP CREATE", func(c recordedCmd) bool { return c.name() == "xgroup" && c.err == nil })
		late := b.publish(t, "after the group", nil)
		if got := finalIDs(finals(t, b.rec, 1)); !slices.Equal(got, []string{late}) {
			t.Fatalf("settled %v, want [%s]", got, late)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := len(b.rec.Events()); got != 1 {
			t.Fatalf("%d settlements, want 1", got)
		}
	})
}

func TestStreamRestartHandlesOwnPendingFirst(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	if err := b.r.Client.XGroupCreateMkStream(ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	p1 := b.publish(t, "pending 1", nil)
	p2 := b.publish(t, "pending 2", nil)
	// The consumer's previous life: delivered, never settled.
	got, err := b.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "worker-1", Streams: []string{b.in, ">"}, Count: 2}).Result()
	if err != nil || len(got[0].Messages) != 2 {
		t.Fatalf("xreadgroup = %v, %v", got, err)
	}
	n1 := b.publish(t, "new 1", nil)
	n2 := b.publish(t, "new 2", nil)

	start(t, b.app(t, b.stream(settle.Consumer("worker-1"), settle.Batch(1)), ack, settle.Concurrency(1)))
	if ids := finalIDs(finals(t, b.rec, 4)); !slices.Equal(ids, []string{p1, p2, n1, n2}) {
		t.Fatalf("settled %v, want own pending entries first: [%s %s %s %s]", ids, p1, p2, n1, n2)
	}
	if n := b.pending(t); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}

func TestStreamRetryIsOneAtomicStep(t *testing.T) {
	t.Parallel()

	t.Run("CopyCarriesRetryCountAndOriginalIsAcked", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		id := b.publish(t, "hello", map[string]string{"tenant": "acme"})
		var seen []settle.Message
		var mu sync.Mutex
		h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, *m)
			if m.Attempt == 1 {
				return settle.Retry(errors.New("busy"))
			}
			return nil
		})
		start(t, b.app(t, b.stream(), h, settle.Concurrency(1)))
		evs := finals(t, b.rec, 1)
		if len(evs) != 2 || evs[0].Action != settle.ActionCopy || evs[0].Err != nil || evs[0].ID != id {
			t.Fatalf("events %+v, want a copy of %s then an ack", evs, id)
		}

		entries := b.entries(t, b.in)
		if len(entries) != 2 {
			t.Fatalf("stream has %d entries, want the original and its copy", len(entries))
		}
		orig, cp := entries[0].Values, entries[1].Values
		if cp["payload"] != orig["payload"] || cp["tenant"] != "acme" || cp[settle.HeaderRetryCount] != "1" || cp[settle.HeaderOriginID] != id || len(cp) != 4 {
			t.Fatalf("copy %v, want the original's payload and headers %v with %s=1 and %s=%s", cp, orig, settle.HeaderRetryCount, settle.HeaderOriginID, id)
		}
		if n := b.pending(t); n != 0 {
			t.Fatalf("%d pending, want 0: the original was acked with its copy", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || seen[1].Attempt != 2 || seen[1].Headers["tenant"] != "acme" || string(seen[1].Payload) != string(seen[0].Payload) {
			t.Fatalf("deliveries %+v, want the copy delivered as attempt 2 with the same payload and headers", seen)
		}
	})

	t.Run("FailedDeadLetterWriteLeavesOriginalPending", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		ctx := context.Background()
		// The dead-letter key holds a string: the XADD of the dead letter fails.
		if err := b.r.Client.Set(ctx, b.dlq, "occupied", 0).Err(); err != nil {
			t.Fatal(err)
		}
		id := b.publish(t, "doomed", nil)
		fail := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("declined") })
		stop := start(t, b.app(t, b.stream(), fail, settle.MaxAttempts(1), settle.DeadLetter(b.dlq), settle.Concurrency(1)))
		evs := b.rec.WaitFor(t, waitBound, "a failed dead letter", func(evs []settle.Settled) bool { return len(evs) > 0 })
		if evs[0].Action != settle.ActionDeadLetter || evs[0].Err == nil || !strings.Contains(evs[0].Err.Error(), b.dlq) {
			t.Fatalf("event %+v, want a dead letter that failed naming %s", evs[0], b.dlq)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}

		p, err := b.r.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.in, Group: b.group, Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(p) != 1 || p[0].ID != id {
			t.Fatalf("pending %+v, %v; want the original %s still pending (not acked without its dead letter)", p, err, id)
		}
		if v, err := b.r.Client.Get(ctx, b.dlq).Result(); err != nil || v != "occupied" {
			t.Fatalf("dead-letter key = %q, %v; want it untouched", v, err)
		}
		if n := len(b.entries(t, b.in)); n != 1 {
			t.Fatalf("stream has %d entries, want 1: nothing half-written", n)
		}
	})

	t.Run("FailedCopyWriteRedeliversOriginal", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		if b.r.Mini == nil {
			t.Skip("needs miniredis's fault injection (SetError); the dead-letter subtest covers a failed write on a real server")
		}
		id := b.publish(t, "hello", nil)
		var calls atomic.Int32
		h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if calls.Add(1) == 1 {
				b.r.Mini.SetError("ERR injected failure")
				return settle.Retry(errors.New("busy"))
			}
			return nil
		})
		cfg := b.config()
		cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
			if s.Err != nil {
				b.r.Mini.SetError("")
			}
			b.rec.OnSettled(ctx, s)
		}
		app, err := settle.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(b.stream(), h, settle.Concurrency(1))
		start(t, app)
		evs := finals(t, b.rec, 1)
		if len(evs) != 2 || evs[0].Action != settle.ActionCopy || evs[0].Err == nil || evs[1].Action != settle.ActionAck || evs[1].ID != id || evs[1].Attempt != 2 {
			t.Fatalf("events %+v, want a failed copy, then the original %s delivered again (attempt 2: the unsettled delivery counts) and acked", evs, id)
		}
		if n := len(b.entries(t, b.in)); n != 1 {
			t.Fatalf("stream has %d entries, want 1: the failed copy wrote nothing", n)
		}
		if n := b.pending(t); n != 0 {
			t.Fatalf("%d pending, want 0", n)
		}
	})
}

func TestStreamReadsEntriesWrittenByOtherClients(t *testing.T) {
	t.Parallel()

	t.Run("PlainHandlerSeesFieldsAsHeaders", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		id := b.xadd(t, b.in, "name", "bob", "age", "3")
		got := make(chan settle.Message, 1)
		h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- *m
			return nil
		})
		start(t, b.app(t, b.stream(), h))
		finals(t, b.rec, 1)
		m := <-got
		if m.ID != id || len(m.Headers) != 2 || m.Headers["name"] != "bob" || m.Headers["age"] != "3" || len(m.Payload) != 0 || m.Attempt != 1 {
			t.Fatalf("message %+v, want headers name=bob age=3, no payload, attempt 1", m)
		}
	})

	t.Run("TypedHandlerGetsDecodeErrorAndDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setupStream(t)
		b.xadd(t, b.in, "name", "bob", "age", "3")
		h := settle.Typed(func(context.Context, *settle.Message, map[string]any) error {
			t.Error("the typed function ran without a payload")
			return nil
		})
		// Concurrency(1): the copy's own settlement cannot be reported before the copy's.
		start(t, b.app(t, b.stream(), h, settle.MaxAttempts(2), settle.DeadLetter(b.dlq), settle.Concurrency(1)))
		evs := finals(t, b.rec, 1)
		// A decode error is a plain failure: its retry waits the backoff (parked in the
		// process, then copied), then the cap's dead letter.
		if len(evs) != 3 || evs[0].Action != settle.ActionPark || evs[1].Action != settle.ActionCopy || evs[2].Action != settle.ActionDeadLetter {
			t.Fatalf("events %+v, want a retry after the backoff (park, copy) then a dead letter", evs)
		}
		var de *settle.DecodeError
		if !errors.As(evs[0].HandlerErr, &de) || !strings.Contains(de.Error(), "payload") {
			t.Fatalf("handler error %v, want a *DecodeError naming the missing payload field", evs[0].HandlerErr)
		}

		dead := b.entries(t, b.dlq)
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		v := dead[0].Values
		if v["name"] != "bob" || v["age"] != "3" || v[settle.HeaderRetryCount] != "2" || v[settle.HeaderDeadSource] != b.in ||
			v[settle.HeaderDeadID] != evs[2].ID || !strings.Contains(fmt.Sprint(v[settle.HeaderDeadError]), "payload") || v[settle.HeaderDeadReason] == "" {
			t.Fatalf("dead letter %v, want the original fields, retry count 2 and the dead-letter headers", v)
		}
		if _, ok := v["payload"]; ok {
			t.Fatalf("dead letter %v has a payload field the original did not have", v)
		}
	})
}

func TestStreamGarbledRetryCountReadsAsZeroAndLogsOnce(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	b.xadd(t, b.in, "payload", "x", settle.HeaderRetryCount, "abc")
	b.xadd(t, b.in, "payload", "y", settle.HeaderRetryCount, "-1")
	var attempts []int
	var mu sync.Mutex
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt)
		return nil
	})
	start(t, b.app(t, b.stream(), h))
	finals(t, b.rec, 2)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Fatalf("attempts %v, want [1 1]: a garbled retry count reads as 0", attempts)
	}
	if n := len(b.logs.containing("garbled")); n != 1 {
		t.Fatalf("%d garbled-header logs, want exactly 1", n)
	}
}

func TestStreamDeadLetterMaxLenBoundsDeadLetterStream(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	const maxLen = 3
	n := 5
	if redistest.Real() {
		// Real Redis trims MAXLEN ~ by whole macro nodes: publish enough to fill some.
		n = 300
	}
	var ids []string
	for i := range n {
		ids = append(ids, b.publish(t, i, nil))
	}
	fail := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("declined") })
	start(t, b.app(t, b.stream(), fail, settle.DeadLetter(b.dlq), settle.DeadLetterMaxLen(maxLen), settle.Concurrency(1)))
	finals(t, b.rec, n)

	dead := b.entries(t, b.dlq)
	if redistest.Real() {
		if len(dead) < maxLen || len(dead) >= n {
			t.Fatalf("%d dead letters of %d, want at least %d and fewer than all: trimmed", len(dead), n, maxLen)
		}
		return
	}
	// miniredis trims exactly: the newest maxLen remain.
	var got []string
	for _, d := range dead {
		got = append(got, fmt.Sprint(d.Values[settle.HeaderDeadID]))
	}
	if want := ids[n-maxLen:]; !slices.Equal(got, want) {
		t.Fatalf("dead letters of %v, want the newest %d: %v", got, maxLen, want)
	}
}

func TestStreamPendingEntryDeletedBeforeSettlementIsAcknowledged(t *testing.T) {
	t.Parallel()
	redistest.RealOnly(t) // miniredis silently skips deleted entries when re-reading a consumer's pending list
	b := setupStream(t)
	ctx := context.Background()
	if err := b.r.Client.XGroupCreateMkStream(ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	gone := b.publish(t, "deleted", nil)
	if err := b.r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "worker-1", Streams: []string{b.in, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.r.Client.XDel(ctx, b.in, gone).Err(); err != nil {
		t.Fatal(err)
	}
	next := b.publish(t, "next", nil)

	start(t, b.app(t, b.stream(settle.Consumer("worker-1")), ack, settle.Concurrency(1)))
	// The deleted entry is acknowledged while re-reading own pending entries, before
	// any new entry is read.
	if ids := finalIDs(finals(t, b.rec, 1)); !slices.Equal(ids, []string{next}) {
		t.Fatalf("settled %v, want only [%s]: a deleted entry reaches no handler", ids, next)
	}
	if n := b.pending(t); n != 0 {
		t.Fatalf("%d pending, want 0: the deleted entry is acknowledged", n)
	}
	logs := b.logs.containing("deleted from the stream")
	if len(logs) != 1 || logs[0].level != slog.LevelWarn || !strings.Contains(logs[0].attrs["ids"], gone) {
		t.Fatalf("logs %+v, want one warning naming %s", logs, gone)
	}
}

func TestStreamRecreatesDestroyedGroup(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	first := b.publish(t, "first", nil)
	start(t, b.app(t, b.stream(), ack, settle.Concurrency(1)))
	finals(t, b.rec, 1)

	if err := b.r.Client.XGroupDestroy(ctx, b.in, b.group).Err(); err != nil {
		t.Fatal(err)
	}
	second := b.publish(t, "second", nil)
	// The recreated group starts after the first entry (the last delivered here): at
	// least once, never lost.
	b.rec.WaitFor(t, waitBound, "the entry published after the group was destroyed", func(evs []settle.Settled) bool {
		return slices.Contains(finalIDs(evs), second)
	})
	for _, id := range finalIDs(b.rec.Events()) {
		if id != first && id != second {
			t.Fatalf("settled unknown id %s", id)
		}
	}
	if len(b.logs.containing("created it again")) == 0 {
		t.Fatal("no warning that the group was created again")
	}
	groups, err := b.r.Client.XInfoGroups(ctx, b.in).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != b.group {
		t.Fatalf("groups = %+v, %v; want %q again", groups, err, b.group)
	}
}

func TestStreamWrongTypeKeyFailsOpenNamingKey(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	if err := b.r.Client.Set(ctx, b.in, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	app := b.app(t, b.stream(), ack)
	runCtx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	err := app.Run(runCtx)
	if err == nil || !strings.Contains(err.Error(), b.in) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "open") {
		t.Fatalf("Run = %v, want an Open error naming %s and WRONGTYPE", err, b.in)
	}
	if n := len(b.cmds.named("xreadgroup")); n != 0 {
		t.Fatalf("%d reads, want none after a failed Open", n)
	}
}

// Concurrency bounds the handlers running at once, not the reads: every read asks for a
// full Batch.
func TestStreamConcurrencyBoundsHandlersNotReads(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	const limit, n = 3, 12
	for i := range n {
		b.publish(t, i, nil)
	}
	var running, most atomic.Int32
	started := make(chan struct{}, n)
	release := make(chan struct{}, n)
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		now := running.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		started <- struct{}{}
		<-release
		running.Add(-1)
		return nil
	})
	start(t, b.app(t, b.stream(), h, settle.Concurrency(limit)))
	for i := range n {
		select {
		case <-started:
		case <-time.After(waitBound):
			t.Fatalf("only %d handlers started", i)
		}
		// Once the limit is reached, each start lets one handler finish: a handler
		// beyond the limit would run beside the ones still held.
		if i >= limit-1 {
			release <- struct{}{}
		}
	}
	for range limit - 1 {
		release <- struct{}{}
	}
	finals(t, b.rec, n)
	if got := most.Load(); got != limit {
		t.Fatalf("at most %d handlers ran at once, want %d", got, limit)
	}
	reads := b.cmds.named("xreadgroup")
	biggest := 0
	for _, r := range reads {
		c, err := strconv.Atoi(r.arg("count"))
		if err != nil {
			t.Fatalf("read %v has no COUNT", r.args)
		}
		biggest = max(biggest, c)
	}
	for _, r := range reads {
		if c, _ := strconv.Atoi(r.arg("count")); c != settle.DefaultBatch {
			t.Fatalf("a read asked for %d entries, want a full batch (%d) each time, whatever the free handlers", c, settle.DefaultBatch)
		}
	}
}

// Prefetch bounds what a mount holds read and not started: with one handler blocked,
// Concurrency(1), Batch(2) and Prefetch(3), the consumer holds 4 entries (one running,
// three waiting), read two at a time, and reads no more until some settle.
func TestStreamPrefetchBoundsWhatIsHeldAndNotStarted(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	const n = 20
	for i := range n {
		b.publish(t, i, nil)
	}
	release := make(chan struct{})
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		<-release
		return nil
	})
	start(t, b.app(t, b.stream(settle.Batch(2)), h, settle.Concurrency(1), settle.Prefetch(3)))
	b.cmds.waitN(t, "two reads of new entries", 2, func(c recordedCmd) bool {
		return c.name() == "xreadgroup" && fmt.Sprint(c.args[len(c.args)-1]) == ">"
	})
	if got := b.pending(t); got != 4 {
		t.Fatalf("%d entries held with one handler blocked, want 4 (1 running + Prefetch 3)", got)
	}
	close(release)
	finals(t, b.rec, n)
	for _, r := range b.cmds.named("xreadgroup") {
		if c, _ := strconv.Atoi(r.arg("count")); c != 2 && fmt.Sprint(r.args[len(r.args)-1]) == ">" {
			t.Fatalf("a read asked for %d entries, want Batch(2) each time", c)
		}
	}
}

func TestStreamShutdownEndsWithinBlockBound(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	const block = 300 * time.Millisecond
	stop := start(t, b.app(t, settle.Stream(b.client, b.in, b.group, settle.Block(block)), ack))
	b.cmds.waitFor(t, "a blocking read", func(c recordedCmd) bool {
		return c.name() == "xreadgroup" && c.arg("block") != ""
	})
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A read in progress cannot be interrupted; the shutdown waits for it and no more.
	if took := time.Since(began); took > block+2*time.Second {
		t.Fatalf("shutdown took %s, want about the block bound %s", took, block)
	}
}

func TestStreamFailedSettlementBacksOffBeforeRedelivery(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	// Every dead letter fails: the key holds a string.
	if err := b.r.Client.Set(ctx, b.dlq, "occupied", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b.publish(t, "doomed", nil)
	var mu sync.Mutex
	var at []time.Time
	cfg := b.config()
	cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		b.rec.OnSettled(ctx, s)
	}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fail := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("declined") })
	app.Mount(b.stream(), fail, settle.MaxAttempts(1), settle.DeadLetter(b.dlq), settle.Concurrency(1))
	stop := start(t, app)
	b.rec.WaitFor(t, waitBound, "three failed dead letters", func(evs []settle.Settled) bool { return len(evs) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The delivery comes back at once (it stays pending), but not before a pause that
	// grows while the failures go on: not a hot loop.
	first, second := at[1].Sub(at[0]), at[2].Sub(at[1])
	if first < 90*time.Millisecond || second < 180*time.Millisecond {
		t.Fatalf("redelivered after %s, then %s; want pauses of about 100ms, then 200ms", first, second)
	}
	for _, e := range b.rec.Events() {
		if e.Err == nil {
			t.Fatalf("event %+v succeeded; want every dead letter to fail", e)
		}
	}
}

func TestSeek(t *testing.T) {
	t.Parallel()

	t.Run("StreamRedeliversWithTheRetryCountHeaderUnchanged", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		plain := w.publish(t, "plain", nil)
		// A retry copy written by another subscription: retry count 2.
		copied, err := w.r.Client.XAdd(w.ctx, &redis.XAddArgs{Stream: w.in, Values: []any{"payload", "x", settle.HeaderRetryCount, "2"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		src := settle.Stream(w.r.Client, w.in, w.group, settle.Block(50*time.Millisecond))
		w.run(t, w.app(t, src, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })))
		w.waitEvents(t, "both acked", 2, func(e settle.Settled) bool { return e.Action == settle.ActionAck })

		if err := src.Seek(w.ctx, "0"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		acks := w.waitEvents(t, "both acked again", 4, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		want := map[string]int{plain: 1, copied: 3}
		for _, e := range acks[2:] {
			if e.Attempt != want[e.ID] {
				t.Fatalf("replayed %s at attempt %d, want %d (the retry-count header is unchanged)", e.ID, e.Attempt, want[e.ID])
			}
		}
		if acks[2].ID == acks[3].ID {
			t.Fatalf("replay delivered %s twice and not the other entry", acks[2].ID)
		}
	})

	t.Run("ClaimingStreamRestartsTheDeliveryCount", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		id := w.publish(t, "x", nil)
		second := make(chan struct{})
		seeked := make(chan struct{})
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { close(seeked) }) }
		var a attempts
		src := w.claiming()
		// Prefetch(0): a read-ahead would re-read the entry while the second delivery
		// holds it, and a re-read of an entry in flight here is not handled twice: it
		// would come back after min-idle, at the count the re-read restarted (2).
		w.run(t, w.app(t, src, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			switch len(a.all()) {
			case 1:
				return errClaimTest
			case 2:
				close(second)
				<-seeked
				return errClaimTest
			}
			return nil
		}), settle.Concurrency(1), settle.Prefetch(0), settle.MaxAttempts(5)))
		t.Cleanup(release) // runs before Run's cleanup: a failed test does not hang the handler

		w.waitEvents(t, "the first retry", 1, func(e settle.Settled) bool { return e.Action == settle.ActionLeave })
		w.advance(w.idle)
		select {
		case <-second:
		case <-time.After(claimWait):
			t.Fatal("the retry did not come back after min-idle")
		}
		if err := src.Seek(w.ctx, "0"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		release()
		acked := w.waitEvents(t, "the replayed delivery", 1, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		if acked[0].ID != id || acked[0].Attempt != 1 {
			t.Fatalf("replayed delivery = %+v, want %s at attempt 1: Redis counts deliveries from 1 again", acked[0], id)
		}
		got := a.all()
		if len(got) != 3 || got[0].attempt != 1 || got[1].attempt != 2 || got[2].attempt != 1 {
			t.Fatalf("attempts seen = %+v, want 1, 2, then 1 after the seek", got)
		}
	})

	t.Run("CreatesAMissingGroupAtTheID", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		w.publish(t, "old", nil)
		src := settle.Stream(w.r.Client, w.in, w.group)
		if err := src.Seek(w.ctx, "$"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		groups, err := w.r.Client.XInfoGroups(w.ctx, w.in).Result()
		if err != nil || len(groups) != 1 || groups[0].Name != w.group {
			t.Fatalf("groups = %+v (%v), want %s", groups, err, w.group)
		}
		last, err := w.r.Client.XInfoStream(w.ctx, w.in).Result()
		if err != nil || groups[0].LastDeliveredID != last.LastGeneratedID {
			t.Fatalf("group at %s, want the stream's end %s (%v)", groups[0].LastDeliveredID, last.LastGeneratedID, err)
		}
	})
}
