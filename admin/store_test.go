package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/wire"
)

// deadHeaders are the headers settle writes on a dead letter of source that failed
// with lastErr, dead-lettered at.
func deadHeaders(source, lastErr string, at time.Time) map[string]string {
	return map[string]string{
		settle.HeaderDeadAt:     at.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		settle.HeaderDeadError:  lastErr,
		settle.HeaderDeadReason: "max attempts reached (2 of 2)",
		settle.HeaderDeadSource: source,
	}
}

// addDead writes n dead letters of b.in to the dead-letter stream or list b.dlq, each
// failing with lastErr.
func (b *testBundle) addDead(t *testing.T, list bool, n int, lastErr string) {
	t.Helper()
	for k := 0; k < n; k++ {
		h := deadHeaders(b.in, lastErr, time.Now())
		var err error
		if list {
			err = b.r.Client.RPush(b.ctx, b.dlq, wire.Envelope([]byte(fmt.Sprintf("p%d", k)), h)).Err()
		} else {
			err = b.r.Client.XAdd(b.ctx, wireAdd(b.dlq, []byte(fmt.Sprintf("p%d", k)), h)).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// count is how many dead letters (stream entries or list members) b.dlq holds.
func (b *testBundle) count(t *testing.T, list bool) int64 {
	t.Helper()
	if list {
		n, err := b.r.Client.LLen(b.ctx, b.dlq).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return b.xlen(t, b.dlq)
}

// TestAConfirmedActionTouchesOnlyWhatItsDryRunShowed is rule 1 of issue 23 for admin's
// API: a dry run fixes a Selection (the filter, the count shown, the newest shown);
// dead letters that arrive before the action are left alone, and the action says how
// many of the shown were gone meanwhile. Each filter, for a stream and a list, for a
// replay and a purge.
func TestAConfirmedActionTouchesOnlyWhatItsDryRunShowed(t *testing.T) {
	t.Parallel()
	filters := map[string]admin.Filter{
		"none":   {},
		"error":  {Error: "unavailable"},
		"reason": {Reason: "unavailable"}, // matches the last error: one filter language
		"since":  {Since: time.Now().Add(-time.Hour)},
	}
	for _, kind := range []string{"stream", "list"} {
		for name, f := range filters {
			for _, verb := range []string{"replay", "purge"} {
				t.Run(kind+"/"+name+"/"+verb, func(t *testing.T) {
					t.Parallel()
					b := setup(t)
					list := kind == "list"
					var st admin.DeadLetterStore = b.insp.StreamDeadLetters(b.dlq)
					if list {
						st = b.insp.ListDeadLetterStore(b.dlq)
					} else if err := b.r.Client.XAdd(b.ctx, wireAdd(b.in, []byte("seed"), nil)).Err(); err != nil {
						t.Fatal(err) // a stream destination must exist
					}
					b.addDead(t, list, 3, "payment provider unavailable")
					sel := dryRun(t, b.ctx, st, verb, admin.Selection{Filter: f})
					if sel.Count != 3 {
						t.Fatalf("dry run shows %d, want 3", sel.Count)
					}
					time.Sleep(2 * time.Millisecond) // the arrivals are newer than the newest shown
					b.addDead(t, list, 5, "payment provider unavailable")
					// One of the shown is gone meanwhile (another operator's purge).
					first, err := st.Page(b.ctx, admin.Filter{}, 1)
					if err != nil || len(first) != 1 {
						t.Fatalf("Page = %v, %v", first, err)
					}
					if _, err := st.Purge(b.ctx, admin.Selection{Filter: admin.Filter{IDs: []string{first[0].ID}}}); err != nil {
						t.Fatal(err)
					}
					done, gone := act(t, b.ctx, st, verb, sel)
					if done != 2 || gone != 1 {
						t.Fatalf("%s acted on %d with %d gone meanwhile, want 2 and 1 (the 5 arrivals untouched)", verb, done, gone)
					}
					if n := b.count(t, list); n != 5 {
						t.Fatalf("dead letter holds %d after the %s, want the 5 arrivals", n, verb)
					}
				})
			}
		}
	}
}

// TestAConfirmedActionOnIDsSaysWhichWereGoneInsteadOfRefusing: ids the operator
// confirmed that another hand took meanwhile are reported, not an error.
func TestAConfirmedActionOnIDsSaysWhichWereGoneInsteadOfRefusing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st := b.insp.StreamDeadLetters(b.dlq)
	b.addDead(t, false, 3, "boom")
	dls, err := st.Page(b.ctx, admin.Filter{}, 0)
	if err != nil || len(dls) != 3 {
		t.Fatalf("Page = %d, %v", len(dls), err)
	}
	ids := []string{dls[0].ID, dls[2].ID}
	sel := dryRun(t, b.ctx, st, "purge", admin.Selection{Filter: admin.Filter{IDs: ids}})
	if _, err := b.r.Client.XDel(b.ctx, b.dlq, dls[0].ID).Result(); err != nil {
		t.Fatal(err)
	}
	done, gone := act(t, b.ctx, st, "purge", sel)
	if done != 1 || gone != 1 || b.xlen(t, b.dlq) != 1 {
		t.Fatalf("purge of 2 confirmed ids, one gone: deleted %d, gone %d, left %d; want 1, 1, 1", done, gone, b.xlen(t, b.dlq))
	}
}

func dryRun(t *testing.T, ctx context.Context, st admin.DeadLetterStore, verb string, sel admin.Selection) admin.Selection {
	t.Helper()
	var shown *admin.Selection
	if verb == "replay" {
		res, err := st.Replay(ctx, sel, admin.DryRun())
		if err != nil {
			t.Fatal(err)
		}
		shown = res.Selection
	} else {
		res, err := st.Purge(ctx, sel, admin.DryRun())
		if err != nil {
			t.Fatal(err)
		}
		shown = res.Selection
	}
	if shown == nil {
		t.Fatal("a dry run returned no Selection")
	}
	return *shown
}

func act(t *testing.T, ctx context.Context, st admin.DeadLetterStore, verb string, sel admin.Selection) (done, gone int) {
	t.Helper()
	if verb == "replay" {
		res, err := st.Replay(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Replayed), res.Meanwhile
	}
	res, err := st.Purge(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	return int(res.Deleted), res.Meanwhile
}

// wireAdd is the XADD of an entry with payload and headers, as settle writes it.
func wireAdd(key string, payload []byte, headers map[string]string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: key, Values: wire.StreamValues(payload, headers)}
}

// TestASummaryCountsTheNewestSampleAndSaysSo: with a sample bound the summary reads the
// newest dead letters only and says how many, with the key's whole length beside.
func TestASummaryCountsTheNewestSampleAndSaysSo(t *testing.T) {
	t.Parallel()
	for _, list := range []bool{false, true} {
		b := setup(t)
		st := b.insp.StreamDeadLetters(b.dlq)
		if list {
			st = b.insp.ListDeadLetterStore(b.dlq)
		}
		b.addDead(t, list, 7, "old error")
		b.addDead(t, list, 5, "new error")
		s, err := st.Summary(b.ctx, admin.Filter{}, 5)
		if err != nil {
			t.Fatal(err)
		}
		if s.Count != 5 || s.Sampled != 5 || s.Total != 12 || len(s.ByError) != 1 || s.ByError[0].Value != "new error" {
			t.Fatalf("list %v: sampled summary = count %d, sampled %d, total %d, by error %+v; want the 5 newest of 12", list, s.Count, s.Sampled, s.Total, s.ByError)
		}
		if s, err = st.Summary(b.ctx, admin.Filter{}, 0); err != nil || s.Count != 12 || s.Sampled != 0 {
			t.Fatalf("list %v: whole summary = %+v, %v", list, s, err)
		}
	}
}

// TestAPageCutsEachFieldInRedisAndSaysHowLargeThePayloadIs.
func TestAPageCutsEachFieldInRedisAndSaysHowLargeThePayloadIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := make([]byte, admin.PageCut+100)
	if err := b.r.Client.XAdd(b.ctx, wireAdd(b.dlq, big, map[string]string{"h": "small"})).Err(); err != nil {
		t.Fatal(err)
	}
	dls, err := b.insp.StreamDeadLetters(b.dlq).Page(b.ctx, admin.Filter{}, 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("Page = %v, %v", dls, err)
	}
	if d := dls[0]; !d.Cut || d.Size != int64(len(big)) || len(d.Payload) != admin.PageCut || d.Headers["h"] != "small" {
		t.Fatalf("page entry: cut %v, size %d, payload %d bytes, headers %v", d.Cut, d.Size, len(d.Payload), d.Headers)
	}
	piece, size, err := b.insp.PayloadChunk(b.ctx, b.dlq, dls[0].ID, admin.PageCut, 1000)
	if err != nil || size != int64(len(big)) || len(piece) != 100 {
		t.Fatalf("PayloadChunk = %d bytes, size %d, %v", len(piece), size, err)
	}
}
