package settle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
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
	b := setupStream(t)
	_, err := settle.NewPublisher(b.r.Client).PublishBytes(context.Background(), b.in, []byte("x"), settle.Headers(manyHeaders(settle.MaxHeaders+1)))
	if !errors.Is(err, settle.ErrTooManyHeaders) {
		t.Fatalf("publish: %v, want ErrTooManyHeaders", err)
	}
	if got := b.entries(t, b.in); len(got) != 0 {
		t.Fatalf("%d entries written, want none", len(got))
	}
}

// TestStreamMessageWithMaxHeadersIsParkedSweptCopiedAndDeadLetteredWhole: a message
// with as many headers as the Publisher takes goes through every settlement script
// (park, sweep, retry copy, dead letter) with every header kept.
func TestStreamMessageWithMaxHeadersIsParkedSweptCopiedAndDeadLetteredWhole(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	headers := manyHeaders(settle.MaxHeaders)
	b.publish(t, "big", headers)
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
	start(t, b.app(t, b.stream(), h, settle.MaxAttempts(3), settle.DeadLetter(b.dlq),
		settle.DelayIn(delayed.DurableZset{Key: b.r.Key("delayed")})))
	evs := finals(t, b.rec, 1)
	last := evs[len(evs)-1]
	if last.Action != settle.ActionDeadLetter || last.Attempt != 3 {
		t.Fatalf("settled %s at attempt %d (%v), want a dead letter at 3", last.Action, last.Attempt, last.Err)
	}
	dead := b.entries(t, b.dlq)
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
			b := setupStream(t)
			first := b.publish(t, "first", nil)
			values := []any{wire.FieldPayload, "big"}
			for k, v := range manyHeaders(4100) { // beyond what Lua hands one call, on every server
				values = append(values, k, v)
			}
			big := b.xadd(t, b.in, values...)
			last := b.publish(t, "last", nil)
			var opts []settle.MountOption
			if withDLQ {
				opts = append(opts, settle.DeadLetter(b.dlq), settle.MaxAttempts(3))
			}
			start(t, b.app(t, b.stream(), ack, opts...))
			evs := finals(t, b.rec, 2)
			if got := finalIDs(evs); len(got) != 2 || !slices.Contains(got, first) || !slices.Contains(got, last) {
				t.Fatalf("handled %v, want only %s and %s", got, first, last)
			}
			if n := b.pending(t); n != 0 {
				t.Fatalf("%d entries pending, want none", n)
			}
			logs := b.logs.containing("too large to settle")
			if len(logs) != 1 || !strings.Contains(logs[0].attrs["reason"], big) {
				t.Fatalf("logs %+v, want one Error naming %s", logs, big)
			}
			dead := b.entries(t, b.dlq)
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
			if v[wire.FieldPayload] != "big" || v[settle.HeaderDeadID] != big || v[settle.HeaderDeadSource] != b.in ||
				!strings.Contains(fmt.Sprint(v[settle.HeaderDeadReason]), "by reference") {
				t.Fatalf("dead letter %v, want the payload and a reason naming the entry", v)
			}
		})
	}
}

// TestStreamNeighboursOfAnEntryTooLargeToSettleRetryOnceEach: 40 messages retrying at
// once beside a foreign entry too large for the scripts each run exactly twice (the
// retry, then the ack) and leave one copy each: the issue 16 probe saw 16–25 of them
// settled twice when the large entry's move failed half-way through their batch.
func TestStreamNeighboursOfAnEntryTooLargeToSettleRetryOnceEach(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	const n = 40
	for i := range n / 2 {
		b.publish(t, i, nil)
	}
	values := []any{wire.FieldPayload, "big"}
	for k, v := range manyHeaders(4100) {
		values = append(values, k, v)
	}
	b.xadd(t, b.in, values...)
	for i := n / 2; i < n; i++ {
		b.publish(t, i, nil)
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
	start(t, b.app(t, b.stream(settle.Batch(n+1)), h, settle.Concurrency(n+1), settle.MaxAttempts(3), settle.DeadLetter(b.dlq)))
	finals(t, b.rec, n)
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
	if got := len(b.entries(t, b.in)); got != 2*n+1 {
		t.Fatalf("the stream holds %d entries, want %d: each message and one copy of it, and the large entry", got, 2*n+1)
	}
	if got := len(b.entries(t, b.dlq)); got != 1 {
		t.Fatalf("%d dead letters, want the large entry's", got)
	}
}
