package settle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// manyHeaders returns n headers.
func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("h%05d", i)] = "v"
	}
	return h
}

func TestPublishRefusesMoreThanMaxHeadersAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	_, err := settle.NewPublisher(b.R.Client).PublishBytes(context.Background(), b.In, []byte("x"), settle.Headers(manyHeaders(settle.MaxHeaders+1)))
	if !errors.Is(err, settle.ErrTooManyHeaders) {
		t.Fatalf("publish: %v, want ErrTooManyHeaders", err)
	}
	if got := b.Entries(t, b.In); len(got) != 0 {
		t.Fatalf("%d entries written, want none", len(got))
	}
}

// TestStreamMessageWithMaxHeadersIsParkedSweptCopiedAndDeadLetteredWhole: a message
// with as many headers as the Publisher takes goes through every settlement script
// (park, sweep, retry copy, dead letter) with every header kept.
func TestStreamMessageWithMaxHeadersIsParkedSweptCopiedAndDeadLetteredWhole(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	headers := manyHeaders(settle.MaxHeaders)
	b.Publish(t, "big", headers)
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if len(m.Headers) < settle.MaxHeaders {
			return settle.Drop(fmt.Errorf("attempt %d arrived with %d headers", m.Attempt, len(m.Headers)))
		}
		switch m.Attempt {
		case 1:
			return settle.RetryAfter(time.Millisecond, errors.New("later")) // park, then sweep
		case 2:
			return settle.Retry(errors.New("again")) // a retry copy
		}
		return errors.New("declined") // the cap: dead letter
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.MaxAttempts(3), settle.DeadLetter(b.DLQ),
		settle.DelayIn(delayed.DurableZset{Key: b.R.Key("delayed")})))
	evs := sourcetest.WaitFinals(t, b.Rec, 1)
	last := evs[len(evs)-1]
	if last.Action != settle.ActionDeadLetter || last.Attempt != 3 {
		t.Fatalf("settled %s at attempt %d (%v), want a dead letter at 3", last.Action, last.Attempt, last.Err)
	}
	dead := b.Entries(t, b.DLQ)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	for k, v := range headers {
		if dead[0].Values[k] != v {
			t.Fatalf("dead letter lost header %q", k)
		}
	}
}

// TestStreamEntryTooLargeToSettleIsDeadLetteredByReference: an entry another client
// wrote with more fields than settle's scripts can write back is never handed to the
// handler (whose failure would leave it pending for ever): it is dead-lettered at once
// by reference (payload, reason naming where its fields stay), or acknowledged with an
// Error without a dead letter; its neighbours are handled as usual.
func TestStreamEntryTooLargeToSettleIsDeadLetteredByReference(t *testing.T) {
	t.Parallel()
	for _, withDLQ := range []bool{true, false} {
		t.Run(fmt.Sprintf("DeadLetter=%t", withDLQ), func(t *testing.T) {
			t.Parallel()
			b := sourcetest.SetupStream(t)
			first := b.Publish(t, "first", nil)
			values := []any{wire.FieldPayload, "big"}
			for k, v := range manyHeaders(4100) { // beyond what Lua hands one call, on every server
				values = append(values, k, v)
			}
			big := b.XAdd(t, b.In, values...)
			last := b.Publish(t, "last", nil)
			var opts []settle.MountOption
			if withDLQ {
				opts = append(opts, settle.DeadLetter(b.DLQ), settle.MaxAttempts(3))
			}
			sourcetest.RunApp(t, b.App(t, b.Stream(), sourcetest.Ack, opts...))
			evs := sourcetest.WaitFinals(t, b.Rec, 2)
			if got := sourcetest.FinalIDs(evs); len(got) != 2 || !slices.Contains(got, first) || !slices.Contains(got, last) {
				t.Fatalf("handled %v, want only %s and %s", got, first, last)
			}
			if n := b.Pending(t); n != 0 {
				t.Fatalf("%d entries pending, want none", n)
			}
			logs := b.Logs.Containing("too large to settle")
			if len(logs) != 1 || !strings.Contains(logs[0].Attrs["reason"], big) {
				t.Fatalf("logs %+v, want one Error naming %s", logs, big)
			}
			dead := b.Entries(t, b.DLQ)
			if !withDLQ {
				if len(dead) != 0 {
					t.Fatalf("%d dead letters without a dead letter declared", len(dead))
				}
				return
			}
			if len(dead) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dead))
			}
			v := dead[0].Values
			if v[wire.FieldPayload] != "big" || v[settle.HeaderDeadID] != big || v[settle.HeaderDeadSource] != b.In ||
				!strings.Contains(fmt.Sprint(v[settle.HeaderDeadReason]), "by reference") {
				t.Fatalf("dead letter %v, want the payload and a reason naming the entry", v)
			}
			// Its fields outlive the entry: the trim may take it, the dead letter keeps them.
			var fields map[string]string
			if err := json.Unmarshal([]byte(fmt.Sprint(v[settle.HeaderDeadFields])), &fields); err != nil || len(fields) != len(values)/2 {
				t.Fatalf("dead letter's %s holds %d fields (%v), want all %d of the entry", settle.HeaderDeadFields, len(fields), err, len(values)/2)
			}
			for i := 0; i < len(values); i += 2 {
				if fields[values[i].(string)] != fmt.Sprint(values[i+1]) {
					t.Fatalf("dead letter's %s: field %v = %q, want %q", settle.HeaderDeadFields, values[i], fields[values[i].(string)], values[i+1])
				}
			}
		})
	}
}

// TestStreamNeighboursOfAnEntryTooLargeToSettleRetryOnceEach: 40 messages retrying at
// once beside a foreign entry too large for the scripts each run exactly twice (the
// retry, then the sourcetest.Ack) and leave one copy each: the issue 16 probe saw 16–25 of them
// settled twice when the large entry's move failed half-way through their batch.
func TestStreamNeighboursOfAnEntryTooLargeToSettleRetryOnceEach(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const n = 40
	for i := range n / 2 {
		b.Publish(t, i, nil)
	}
	values := []any{wire.FieldPayload, "big"}
	for k, v := range manyHeaders(4100) {
		values = append(values, k, v)
	}
	b.XAdd(t, b.In, values...)
	for i := n / 2; i < n; i++ {
		b.Publish(t, i, nil)
	}
	var mu sync.Mutex
	runs := map[string]int{} // payload -> handler runs
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		mu.Lock()
		defer mu.Unlock()
		runs[string(m.Payload)]++
		if m.Attempt == 1 {
			return settle.Retry(errors.New("once more"))
		}
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(settle.Batch(n+1)), h, settle.Concurrency(n+1), settle.MaxAttempts(3), settle.DeadLetter(b.DLQ)))
	sourcetest.WaitFinals(t, b.Rec, n)
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Fatalf("%d messages handled, want %d (the large entry never)", len(runs), n)
	}
	for p, k := range runs {
		if k != 2 {
			t.Fatalf("message %q ran %d times, want 2", p, k)
		}
	}
	if got := len(b.Entries(t, b.In)); got != 2*n+1 {
		t.Fatalf("the stream holds %d entries, want %d: each message and one copy of it, and the large entry", got, 2*n+1)
	}
	if got := len(b.Entries(t, b.DLQ)); got != 1 {
		t.Fatalf("%d dead letters, want the large entry's", got)
	}
}
