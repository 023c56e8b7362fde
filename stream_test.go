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

func TestStreamCreatesMissingGroupWithMkStream(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	app := b.App(t, b.Stream(), sourcetest.Ack)
	sourcetest.RunApp(t, app)

	b.Cmds.WaitFor(t, "a read after Open", func(c sourcetest.RecordedCmd) bool { return c.Name() == "xreadgroup" })
	if n, err := b.R.Client.Exists(ctx, b.In).Result(); err != nil || n != 1 {
		t.Fatalf("stream %s exists = %d, %v; want the stream made by MKSTREAM", b.In, n, err)
	}
	groups, err := b.R.Client.XInfoGroups(ctx, b.In).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != b.Group {
		t.Fatalf("groups = %+v, %v; want one group %q", groups, err, b.Group)
	}
	id := b.Publish(t, "hello", nil)
	if got := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 1)); !slices.Equal(got, []string{id}) {
		t.Fatalf("settled %v, want [%s]", got, id)
	}
}

func TestStreamUsesExistingGroupAsItIs(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	b.Publish(t, "old 1", nil)
	b.Publish(t, "old 2", nil)
	if err := b.R.Client.XGroupCreate(ctx, b.In, b.Group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	id := b.Publish(t, "new", nil)
	// StartAt("0") would read the whole stream were the group created now: an existing
	// group keeps its own position.
	app := b.App(t, b.Stream(settle.StartAt("0")), sourcetest.Ack, settle.Concurrency(1))
	stop := sourcetest.RunApp(t, app)

	if got := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 1)); !slices.Equal(got, []string{id}) {
		t.Fatalf("settled %v, want only the entry after the group's position [%s]", got, id)
	}
	create := b.Cmds.WaitFor(t, "XGROUP CREATE", func(c sourcetest.RecordedCmd) bool {
		return c.Name() == "xgroup" && strings.EqualFold(fmt.Sprint(c.Args[1]), "create")
	})
	if create.Err == nil || !strings.HasPrefix(create.Err.Error(), "BUSYGROUP") {
		t.Fatalf("XGROUP CREATE returned %v, want BUSYGROUP (the group existed)", create.Err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil: BUSYGROUP is fine", err)
	}
	if got := len(b.Rec.Events()); got != 1 {
		t.Fatalf("%d settlements, want 1: entries before the group's position are not read", got)
	}
}

func TestStreamStartAt(t *testing.T) {
	t.Parallel()

	t.Run("DefaultReadsWholeStream", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		old := b.Publish(t, "before the group", nil)
		sourcetest.RunApp(t, b.App(t, b.Stream(), sourcetest.Ack, settle.Concurrency(1)))
		b.Cmds.WaitFor(t, "XGROUP CREATE", func(c sourcetest.RecordedCmd) bool { return c.Name() == "xgroup" })
		late := b.Publish(t, "after the group", nil)
		if got := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 2)); !slices.Equal(got, []string{old, late}) {
			t.Fatalf("settled %v, want [%s %s]", got, old, late)
		}
	})

	t.Run("DollarReadsOnlyNewEntries", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		b.Publish(t, "before the group", nil)
		stop := sourcetest.RunApp(t, b.App(t, b.Stream(settle.StartAt("$")), sourcetest.Ack, settle.Concurrency(1)))
		b.Cmds.WaitFor(t, "XGROUP CREATE", func(c sourcetest.RecordedCmd) bool { return c.Name() == "xgroup" && c.Err == nil })
		late := b.Publish(t, "after the group", nil)
		if got := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 1)); !slices.Equal(got, []string{late}) {
			t.Fatalf("settled %v, want [%s]", got, late)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := len(b.Rec.Events()); got != 1 {
			t.Fatalf("%d settlements, want 1", got)
		}
	})
}

func TestStreamRestartHandlesOwnPendingFirst(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	if err := b.R.Client.XGroupCreateMkStream(ctx, b.In, b.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	p1 := b.Publish(t, "pending 1", nil)
	p2 := b.Publish(t, "pending 2", nil)
	// The consumer's previous life: delivered, never settled.
	got, err := b.R.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.Group, Consumer: "worker-1", Streams: []string{b.In, ">"}, Count: 2}).Result()
	if err != nil || len(got[0].Messages) != 2 {
		t.Fatalf("xreadgroup = %v, %v", got, err)
	}
	n1 := b.Publish(t, "new 1", nil)
	n2 := b.Publish(t, "new 2", nil)

	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Consumer("worker-1"), settle.Batch(1)), sourcetest.Ack, settle.Concurrency(1)))
	if ids := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 4)); !slices.Equal(ids, []string{p1, p2, n1, n2}) {
		t.Fatalf("settled %v, want own pending entries first: [%s %s %s %s]", ids, p1, p2, n1, n2)
	}
	if n := b.Pending(t); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}

func TestStreamRetryIsOneAtomicStep(t *testing.T) {
	t.Parallel()

	t.Run("CopyCarriesRetryCountAndOriginalIsAcked", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		id := b.Publish(t, "hello", map[string]string{"tenant": "acme"})
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
		sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.Concurrency(1)))
		evs := sourcetest.WaitFinals(t, b.Rec, 1)
		if len(evs) != 2 || evs[0].Action != settle.ActionCopy || evs[0].Err != nil || evs[0].ID != id {
			t.Fatalf("events %+v, want a copy of %s then an ack", evs, id)
		}

		entries := b.Entries(t, b.In)
		if len(entries) != 2 {
			t.Fatalf("stream has %d entries, want the original and its copy", len(entries))
		}
		orig, cp := entries[0].Values, entries[1].Values
		if cp["payload"] != orig["payload"] || cp["tenant"] != "acme" || cp[settle.HeaderRetryCount] != "1" || cp[settle.HeaderOriginID] != id || len(cp) != 4 {
			t.Fatalf("copy %v, want the original's payload and headers %v with %s=1 and %s=%s", cp, orig, settle.HeaderRetryCount, settle.HeaderOriginID, id)
		}
		if n := b.Pending(t); n != 0 {
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
		b := sourcetest.SetupStream(t)
		ctx := context.Background()
		// The dead-letter key becomes a string: the XADD of the dead letter fails.
		id := b.Publish(t, "doomed", nil)
		fail := occupyingFailure(t, b.R.Client, b.DLQ)
		stop := sourcetest.RunApp(t, b.App(t, b.Stream(), fail, settle.MaxAttempts(1), settle.DeadLetter(b.DLQ), settle.Concurrency(1)))
		evs := b.Rec.WaitFor(t, sourcetest.WaitBound, "a failed dead letter", func(evs []settle.Settled) bool { return len(evs) > 0 })
		if evs[0].Action != settle.ActionDeadLetter || evs[0].Err == nil || !strings.Contains(evs[0].Err.Error(), b.DLQ) {
			t.Fatalf("event %+v, want a dead letter that failed naming %s", evs[0], b.DLQ)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}

		p, err := b.R.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.In, Group: b.Group, Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(p) != 1 || p[0].ID != id {
			t.Fatalf("pending %+v, %v; want the original %s still pending (not acked without its dead letter)", p, err, id)
		}
		if v, err := b.R.Client.Get(ctx, b.DLQ).Result(); err != nil || v != "occupied" {
			t.Fatalf("dead-letter key = %q, %v; want it untouched", v, err)
		}
		if n := len(b.Entries(t, b.In)); n != 1 {
			t.Fatalf("stream has %d entries, want 1: nothing half-written", n)
		}
	})

	t.Run("FailedCopyWriteRedeliversOriginal", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		if b.R.Mini == nil {
			t.Skip("needs miniredis's fault injection (SetError); the dead-letter subtest covers a failed write on a real server")
		}
		id := b.Publish(t, "hello", nil)
		var calls atomic.Int32
		h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if calls.Add(1) == 1 {
				b.R.Mini.SetError("ERR injected failure")
				return settle.Retry(errors.New("busy"))
			}
			return nil
		})
		cfg := b.Config()
		cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
			if s.Err != nil {
				b.R.Mini.SetError("")
			}
			b.Rec.OnSettled(ctx, s)
		}
		app, err := settle.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(b.Stream(), h, settle.Concurrency(1))
		sourcetest.RunApp(t, app)
		evs := sourcetest.WaitFinals(t, b.Rec, 1)
		if len(evs) != 3 || evs[0].Action != settle.ActionCopy || evs[0].Err == nil ||
			evs[1].Action != settle.ActionCopy || evs[1].Err != nil || evs[1].ID != id || evs[1].Attempt != 1 ||
			evs[2].Action != settle.ActionAck || evs[2].Attempt != 2 || calls.Load() != 2 {
			t.Fatalf("events %+v (handler runs %d), want a failed copy, then the original %s delivered again and its copy written again at attempt 1 without a handler run (a failed write spends no attempt), then the copy acked at attempt 2", evs, calls.Load(), id)
		}
		if n := len(b.Entries(t, b.In)); n != 2 {
			t.Fatalf("stream has %d entries, want 2: the original and the one copy written again (the failed copy wrote nothing)", n)
		}
		if n := b.Pending(t); n != 0 {
			t.Fatalf("%d pending, want 0", n)
		}
	})
}

func TestStreamReadsEntriesWrittenByOtherClients(t *testing.T) {
	t.Parallel()

	t.Run("PlainHandlerSeesFieldsAsHeaders", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		id := b.XAdd(t, b.In, "name", "bob", "age", "3")
		got := make(chan settle.Message, 1)
		h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- *m
			return nil
		})
		sourcetest.RunApp(t, b.App(t, b.Stream(), h))
		sourcetest.WaitFinals(t, b.Rec, 1)
		m := <-got
		if m.ID != id || len(m.Headers) != 2 || m.Headers["name"] != "bob" || m.Headers["age"] != "3" || len(m.Payload) != 0 || m.Attempt != 1 {
			t.Fatalf("message %+v, want headers name=bob age=3, no payload, attempt 1", m)
		}
	})

	t.Run("TypedHandlerGetsDecodeErrorAndDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := sourcetest.SetupStream(t)
		b.XAdd(t, b.In, "name", "bob", "age", "3")
		h := settle.Typed(func(context.Context, *settle.Message, map[string]any) error {
			t.Error("the typed function ran without a payload")
			return nil
		})
		// Concurrency(1): the copy's own settlement cannot be reported before the copy's.
		sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.MaxAttempts(2), settle.DeadLetter(b.DLQ), settle.Concurrency(1)))
		evs := sourcetest.WaitFinals(t, b.Rec, 1)
		// A decode error is a plain failure: its retry waits the backoff (parked in the
		// process, then copied), then the cap's dead letter.
		if len(evs) != 3 || evs[0].Action != settle.ActionPark || evs[1].Action != settle.ActionCopy || evs[2].Action != settle.ActionDeadLetter {
			t.Fatalf("events %+v, want a retry after the backoff (park, copy) then a dead letter", evs)
		}
		var de *settle.DecodeError
		if !errors.As(evs[0].HandlerErr, &de) || !strings.Contains(de.Error(), "payload") {
			t.Fatalf("handler error %v, want a *DecodeError naming the missing payload field", evs[0].HandlerErr)
		}

		dead := b.Entries(t, b.DLQ)
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		v := dead[0].Values
		if v["name"] != "bob" || v["age"] != "3" || v[settle.HeaderRetryCount] != "2" || v[settle.HeaderDeadSource] != b.In ||
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
	b := sourcetest.SetupStream(t)
	b.XAdd(t, b.In, "payload", "x", settle.HeaderRetryCount, "abc")
	b.XAdd(t, b.In, "payload", "y", settle.HeaderRetryCount, "-1")
	var attempts []int
	var mu sync.Mutex
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt)
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(), h))
	sourcetest.WaitFinals(t, b.Rec, 2)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Fatalf("attempts %v, want [1 1]: a garbled retry count reads as 0", attempts)
	}
	if n := len(b.Logs.Containing("garbled")); n != 1 {
		t.Fatalf("%d garbled-header logs, want exactly 1", n)
	}
}

func TestStreamDeadLetterMaxLenBoundsDeadLetterStream(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const maxLen = 3
	n := 5
	if redistest.Real() {
		// Real Redis trims MAXLEN ~ by whole macro nodes: publish enough to fill some.
		n = 300
	}
	var ids []string
	for i := range n {
		ids = append(ids, b.Publish(t, i, nil))
	}
	fail := settle.HandlerFunc(func(context.Context, *settle.Message) error { return errors.New("declined") })
	sourcetest.RunApp(t, b.App(t, b.Stream(), fail, settle.DeadLetter(b.DLQ), settle.DeadLetterMaxLen(maxLen), settle.Concurrency(1)))
	sourcetest.WaitFinals(t, b.Rec, n)

	dead := b.Entries(t, b.DLQ)
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
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	if err := b.R.Client.XGroupCreateMkStream(ctx, b.In, b.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	gone := b.Publish(t, "deleted", nil)
	if err := b.R.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.Group, Consumer: "worker-1", Streams: []string{b.In, ">"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.R.Client.XDel(ctx, b.In, gone).Err(); err != nil {
		t.Fatal(err)
	}
	next := b.Publish(t, "next", nil)

	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Consumer("worker-1")), sourcetest.Ack, settle.Concurrency(1)))
	// The deleted entry is acknowledged while re-reading own pending entries, before
	// any new entry is read.
	if ids := sourcetest.FinalIDs(sourcetest.WaitFinals(t, b.Rec, 1)); !slices.Equal(ids, []string{next}) {
		t.Fatalf("settled %v, want only [%s]: a deleted entry reaches no handler", ids, next)
	}
	if n := b.Pending(t); n != 0 {
		t.Fatalf("%d pending, want 0: the deleted entry is acknowledged", n)
	}
	logs := b.Logs.Containing("deleted from the stream")
	if len(logs) != 1 || logs[0].Level != slog.LevelWarn || !strings.Contains(logs[0].Attrs["ids"], gone) {
		t.Fatalf("logs %+v, want one warning naming %s", logs, gone)
	}
}

func TestStreamRecreatesDestroyedGroup(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	first := b.Publish(t, "first", nil)
	sourcetest.RunApp(t, b.App(t, b.Stream(), sourcetest.Ack, settle.Concurrency(1)))
	sourcetest.WaitFinals(t, b.Rec, 1)

	if err := b.R.Client.XGroupDestroy(ctx, b.In, b.Group).Err(); err != nil {
		t.Fatal(err)
	}
	second := b.Publish(t, "second", nil)
	// The recreated group starts after the first entry (the last delivered here): at
	// least once, never lost.
	b.Rec.WaitFor(t, sourcetest.WaitBound, "the entry published after the group was destroyed", func(evs []settle.Settled) bool {
		return slices.Contains(sourcetest.FinalIDs(evs), second)
	})
	for _, id := range sourcetest.FinalIDs(b.Rec.Events()) {
		if id != first && id != second {
			t.Fatalf("settled unknown id %s", id)
		}
	}
	if len(b.Logs.Containing("created it again")) == 0 {
		t.Fatal("no warning that the group was created again")
	}
	groups, err := b.R.Client.XInfoGroups(ctx, b.In).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != b.Group {
		t.Fatalf("groups = %+v, %v; want %q again", groups, err, b.Group)
	}
}

func TestStreamWrongTypeKeyFailsOpenNamingKey(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	if err := b.R.Client.Set(ctx, b.In, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	app := b.App(t, b.Stream(), sourcetest.Ack)
	runCtx, cancel := context.WithTimeout(ctx, sourcetest.WaitBound)
	defer cancel()
	err := app.Run(runCtx)
	if err == nil || !strings.Contains(err.Error(), b.In) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "open") {
		t.Fatalf("Run = %v, want an Open error naming %s and WRONGTYPE", err, b.In)
	}
	if n := len(b.Cmds.Named("xreadgroup")); n != 0 {
		t.Fatalf("%d reads, want none after a failed Open", n)
	}
}

// Concurrency bounds the handlers running at once, not the reads: every read asks for a
// full Batch.
func TestStreamConcurrencyBoundsHandlersNotReads(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const limit, n = 3, 12
	for i := range n {
		b.Publish(t, i, nil)
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
	sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.Concurrency(limit)))
	for i := range n {
		select {
		case <-started:
		case <-time.After(sourcetest.WaitBound):
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
	sourcetest.WaitFinals(t, b.Rec, n)
	if got := most.Load(); got != limit {
		t.Fatalf("at most %d handlers ran at once, want %d", got, limit)
	}
	reads := b.Cmds.Named("xreadgroup")
	biggest := 0
	for _, r := range reads {
		c, err := strconv.Atoi(r.Arg("count"))
		if err != nil {
			t.Fatalf("read %v has no COUNT", r.Args)
		}
		biggest = max(biggest, c)
	}
	for _, r := range reads {
		if c, _ := strconv.Atoi(r.Arg("count")); c != settle.DefaultBatch {
			t.Fatalf("a read asked for %d entries, want a full batch (%d) each time, whatever the free handlers", c, settle.DefaultBatch)
		}
	}
}

// PrefetchBytes bounds Prefetch by the payloads' size: with one handler blocked,
// Concurrency(1), Batch(2), Prefetch(20) and payloads of 64 KiB, PrefetchBytes(256 KiB)
// lets the consumer hold 5 entries (the one running and 256 KiB of waiting ones): the
// first read, before any size is known, takes a Batch, the next a Batch, the third what
// fits, and none goes out after.
func TestStreamPrefetchBytesBoundsWhatIsHeldByThePayloadsSize(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const n, size = 30, 64 << 10
	for range n {
		b.Publish(t, strings.Repeat("x", size-8), nil) // msgpack adds a few bytes
	}
	release := make(chan struct{})
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		<-release
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Batch(2)), h, settle.Concurrency(1), settle.Prefetch(20), settle.PrefetchBytes(4*size)))
	b.Cmds.WaitN(t, "three reads of new entries", 3, func(c sourcetest.RecordedCmd) bool {
		return c.Name() == "xreadgroup" && fmt.Sprint(c.Args[len(c.Args)-1]) == ">"
	})
	if got := b.Pending(t); got != 5 {
		t.Fatalf("%d entries held with one handler blocked, want 5 (1 running + PrefetchBytes of 4 payloads)", got)
	}
	close(release)
	sourcetest.WaitFinals(t, b.Rec, n)
}

// Prefetch bounds what a mount holds read and not started: with one handler blocked,
// Concurrency(1), Batch(2) and Prefetch(3), the consumer holds 4 entries (one running,
// three waiting), read two at a time, and reads no more until some settle.
func TestStreamPrefetchBoundsWhatIsHeldAndNotStarted(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const n = 20
	for i := range n {
		b.Publish(t, i, nil)
	}
	release := make(chan struct{})
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		<-release
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Batch(2)), h, settle.Concurrency(1), settle.Prefetch(3)))
	b.Cmds.WaitN(t, "two reads of new entries", 2, func(c sourcetest.RecordedCmd) bool {
		return c.Name() == "xreadgroup" && fmt.Sprint(c.Args[len(c.Args)-1]) == ">"
	})
	if got := b.Pending(t); got != 4 {
		t.Fatalf("%d entries held with one handler blocked, want 4 (1 running + Prefetch 3)", got)
	}
	close(release)
	sourcetest.WaitFinals(t, b.Rec, n)
	for _, r := range b.Cmds.Named("xreadgroup") {
		if c, _ := strconv.Atoi(r.Arg("count")); c != 2 && fmt.Sprint(r.Args[len(r.Args)-1]) == ">" {
			t.Fatalf("a read asked for %d entries, want Batch(2) each time", c)
		}
	}
}

func TestStreamShutdownEndsWithinBlockBound(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const block = 300 * time.Millisecond
	stop := sourcetest.RunApp(t, b.App(t, settle.Stream(b.Client, b.In, b.Group, settle.Block(block)), sourcetest.Ack))
	b.Cmds.WaitFor(t, "a blocking read", func(c sourcetest.RecordedCmd) bool {
		return c.Name() == "xreadgroup" && c.Arg("block") != ""
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
	b := sourcetest.SetupStream(t)
	// Every dead letter fails: the key becomes a string.
	b.Publish(t, "doomed", nil)
	var mu sync.Mutex
	var at []time.Time
	cfg := b.Config()
	cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		b.Rec.OnSettled(ctx, s)
	}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(b.Stream(), occupyingFailure(t, b.R.Client, b.DLQ), settle.MaxAttempts(1), settle.DeadLetter(b.DLQ), settle.Concurrency(1))
	stop := sourcetest.RunApp(t, app)
	b.Rec.WaitFor(t, sourcetest.WaitBound, "three failed dead letters", func(evs []settle.Settled) bool { return len(evs) >= 3 })
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
	for _, e := range b.Rec.Events() {
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
