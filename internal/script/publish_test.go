package script_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// ids returns the ids of the stream's entries, in order.
func (b *testBundle) ids(t *testing.T) []string {
	t.Helper()
	msgs, err := b.r.Client.XRange(b.ctx, b.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// readAck delivers up to n new entries to group g and acknowledges the first ack of
// them.
func (b *testBundle) readAck(t *testing.T, g string, n, ack int) {
	t.Helper()
	res, err := b.r.Client.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: g, Consumer: "c", Streams: []string{b.stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		t.Fatalf("xreadgroup %s: %v", g, err)
	}
	for _, m := range res[0].Messages[:ack] {
		if err := b.r.Client.XAck(b.ctx, b.stream, g, m.ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTrim(t *testing.T) {
	t.Parallel()

	t.Run("KeepsWhatAnyGroupHasPendingOrUnreadAndTrimsWhatAllAcknowledged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		var all []string
		for range 10 {
			all = append(all, rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, ID: "", Values: []any{"payload", "x"}}).Val())
		}
		for _, g := range []string{"a", "b"} {
			if err := rdb.XGroupCreate(b.ctx, b.stream, g, "0").Err(); err != nil {
				t.Fatal(err)
			}
		}
		b.readAck(t, "a", 10, 8) // a: entries 9 and 10 pending
		b.readAck(t, "b", 5, 5)  // b: 6 to 10 unread
		// "Now" is a millisecond past the last entry: on the server's TIME, a run that
		// added the entries and trimmed within one millisecond kept them all as young.
		ms, _, _ := strings.Cut(all[9], "-")
		now, _ := strconv.ParseInt(ms, 10, 64)
		now++
		res, err := script.Trim(b.ctx, rdb, b.stream, 0, now)
		if err != nil {
			t.Fatal(err)
		}
		// b's last-delivered entry (the 5th) is the bound: kept, with all after it.
		if got := b.ids(t); res.Trimmed != 4 || res.Bound != all[4] || strings.Join(got, " ") != strings.Join(all[4:], " ") {
			t.Fatalf("trim = %+v, left %v; want the 4 entries before %s trimmed", res, got, all[4])
		}
		b.readAck(t, "b", 5, 5)
		if err := rdb.XGroupCreate(b.ctx, b.stream, "c", "0").Err(); err != nil {
			t.Fatal(err)
		}
		// A group that has read nothing protects everything.
		if res, err := script.Trim(b.ctx, rdb, b.stream, 0, now); err != nil || res.Trimmed != 0 {
			t.Fatalf("trim with an unread group = %+v, %v; want nothing trimmed", res, err)
		}
		if err := rdb.XGroupDestroy(b.ctx, b.stream, "c").Err(); err != nil {
			t.Fatal(err)
		}
		// a's oldest pending entry (the 9th) is now the bound.
		res, err = script.Trim(b.ctx, rdb, b.stream, 0, now)
		if got := b.ids(t); err != nil || res.Trimmed != 4 || strings.Join(got, " ") != strings.Join(all[8:], " ") {
			t.Fatalf("trim = %+v, %v, left %v; want the entries from a's pending %s on", res, err, got, all[8])
		}
	})

	t.Run("KeepsEntriesYoungerThanKeep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rdb := b.r.Client
		for i := range 4 {
			rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, ID: []string{"1000-0", "2000-0", "3000-0", "4000-0"}[i], Values: []any{"payload", "x"}})
		}
		if err := rdb.XGroupCreate(b.ctx, b.stream, "g", "$").Err(); err != nil { // everything read and acknowledged
			t.Fatal(err)
		}
		res, err := script.Trim(b.ctx, rdb, b.stream, 1500*time.Millisecond, 4000)
		if got := b.ids(t); err != nil || res.Trimmed != 2 || strings.Join(got, " ") != "3000-0 4000-0" {
			t.Fatalf("trim keeping 1.5s at 4s = %+v, %v, left %v; want the entries from 2.5s on", res, err, got)
		}
	})

	t.Run("NeverRemovesTheEntriesOfADeadLetterStream", func(t *testing.T) {
		t.Parallel()
		for name, fields := range map[string][][]any{
			"every entry a dead letter": {
				{"payload", "a", "settle-dead-reason", "x"}, {"payload", "b", "settle-dead-at", "t"}, {"payload", "c", "settle-dead-reason", "x"},
			},
			"the oldest not one": {
				{"payload", "a"}, {"payload", "b", "settle-dead-reason", "x"}, {"payload", "c", "settle-dead-reason", "x"},
			},
		} {
			t.Run(name, func(t *testing.T) {
				b := setup(t)
				rdb := b.r.Client
				for i, f := range fields {
					rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, ID: []string{"1000-0", "2000-0", "3000-0"}[i], Values: f})
				}
				// A review mount's group has read and acknowledged every dead letter.
				if err := rdb.XGroupCreate(b.ctx, b.stream, "review", "$").Err(); err != nil {
					t.Fatal(err)
				}
				res, err := script.Trim(b.ctx, rdb, b.stream, 0, 4000)
				if got := b.ids(t); err != nil || res.Trimmed != 0 || len(got) != 3 {
					t.Fatalf("trim = %+v, %v, left %v; want every dead letter kept", res, err, got)
				}
			})
		}
	})

	t.Run("LeavesAStreamWithoutGroupsOrNoStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if res, err := script.Trim(b.ctx, b.r.Client, b.stream, 0, -1); err != nil || res.Trimmed != 0 {
			t.Fatalf("trim of no stream = %+v, %v", res, err)
		}
		b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.stream, Values: []any{"payload", "x"}})
		if res, err := script.Trim(b.ctx, b.r.Client, b.stream, 0, -1); err != nil || res.Trimmed != 0 || len(b.ids(t)) != 1 {
			t.Fatalf("trim of a stream without groups = %+v, %v", res, err)
		}
	})
}

func TestDelayPublish(t *testing.T) {
	t.Parallel()

	t.Run("ScoresByNowPlusDelayOrTheTimeGivenAndRefreshesTheTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now, err := b.r.Client.Time(b.ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		member := wire.DelayMember("publish-1", []byte("p"), nil)
		due, err := script.DelayPublish(b.ctx, b.r.Client, b.set, b.stream, "stream", member, time.Hour, -1, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Duration(due-now.UnixMilli()) * time.Millisecond; d < time.Hour || d > time.Hour+time.Minute {
			t.Fatalf("due %d, %s after the server's TIME; want an hour", due, d)
		}
		if ttl := b.r.Client.PTTL(b.ctx, b.set).Val(); ttl <= time.Hour || ttl > 2*time.Hour {
			t.Fatalf("set TTL %s, want 2h", ttl)
		}
		at := now.Add(30 * time.Minute).UnixMilli()
		if due, err := script.DelayPublish(b.ctx, b.r.Client, b.set, b.stream, "stream", member+"2", 0, at, 0); err != nil || due != at {
			t.Fatalf("DelayPublish at %d = %d, %v", at, due, err)
		}
		if n := b.r.Client.Exists(b.ctx, b.stream).Val(); n != 0 {
			t.Fatal("the stream was written: only the delay set may be")
		}
	})

	t.Run("RefusesAWrongTypeOrADueTimePastTheTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.r.Client.Set(b.ctx, b.stream, "x", 0)
		if _, err := script.DelayPublish(b.ctx, b.r.Client, b.set, b.stream, "stream", "m", time.Second, -1, 0); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("DelayPublish into a string key = %v, want WRONGTYPE", err)
		}
		now := b.r.Client.Time(context.Background()).Val()
		if _, err := script.DelayPublish(b.ctx, b.r.Client, b.set, "", "", "m", 0, now.Add(time.Hour).UnixMilli(), time.Minute); err == nil || !strings.Contains(err.Error(), "TTL") {
			t.Fatalf("DelayPublish past the TTL = %v, want a TTL refusal", err)
		}
		if n := b.r.Client.Exists(b.ctx, b.set).Val(); n != 0 {
			t.Fatal("a refused publish wrote the set")
		}
	})
}
