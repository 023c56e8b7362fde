package admin_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redistest"
)

func TestStreamCountsTheGroupAfterARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	info, err := b.insp.Stream(b.ctx, b.in, b.group)
	if err != nil {
		t.Fatal(err)
	}
	// Every failing payment was delivered twice: the original, then its retry copy.
	if want := int64(published + deadTotal); info.Length != want {
		t.Fatalf("Length %d, want %d (the payments and a retry copy of each that failed)", info.Length, want)
	}
	if info.Pending != 0 || info.OldestPendingID != "" || info.OldestPendingIdle != 0 || len(info.Dead) != 0 {
		t.Fatalf("after the run %+v, want nothing pending and no dead consumer", info)
	}
	if len(info.Consumers) != 1 || info.Consumers[0].Name != "c1" || info.Consumers[0].Pending != 0 {
		t.Fatalf("Consumers %+v, want c1 with nothing pending", info.Consumers)
	}
	if info.ReclaimIdle != settle.DefaultReclaim {
		t.Fatalf("ReclaimIdle %s, want settle.DefaultReclaim", info.ReclaimIdle)
	}
	if redistest.Real() && (info.Lag != 0 || info.EntriesRead != info.Length) {
		// miniredis reports no entries-read and the stream's length as the lag.
		t.Fatalf("Lag %d, EntriesRead %d; want 0 and %d", info.Lag, info.EntriesRead, info.Length)
	}
}

func TestStreamNamesConsumersHoldingEntriesIdlePastReclaimAsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rdb := b.r.Client
	if err := rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		id, err := rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.in, Values: []any{"payload", "x"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	read := func(consumer string, n int64) []redis.XMessage {
		s, err := rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: consumer, Streams: []string{b.in, ">"}, Count: n, Block: -1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return s[0].Messages
	}
	gone := read("gone", 2)
	// gone touches its entries (as a heartbeat does) and dies: miniredis counts a
	// consumer's idle from its last claim only.
	if err := rdb.XClaimJustID(b.ctx, &redis.XClaimArgs{Stream: b.in, Group: b.group, Consumer: "gone", Messages: []string{gone[0].ID, gone[1].ID}}).Err(); err != nil {
		t.Fatal(err)
	}
	live := read("live", 1)
	if err := rdb.XAck(b.ctx, b.in, b.group, live[0].ID).Err(); err != nil {
		t.Fatal(err)
	}

	info, err := b.insp.Stream(b.ctx, b.in, b.group, admin.ReclaimIdle(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if info.Length != 4 || info.Pending != 2 || info.OldestPendingID != ids[0] || info.OldestPendingDeliveries < 1 || len(info.Dead) != 0 {
		t.Fatalf("%+v, want length 4, 2 pending from %s, no dead consumer within an hour", info, ids[0])
	}
	if redistest.Real() && info.Lag != 1 {
		t.Fatalf("Lag %d, want 1 (one entry never read)", info.Lag)
	}

	// Redis's clock must pass the reclaim idle: poll the view, bounded, until it does.
	const idle = 20 * time.Millisecond
	deadline := time.Now().Add(waitBound)
	for {
		info, err = b.insp.Stream(b.ctx, b.in, b.group, admin.ReclaimIdle(idle))
		if err != nil {
			t.Fatal(err)
		}
		// Both reads must pass it: the view reads the oldest entry's idle before the
		// consumers', and a stall between the two can put the idle mark between them.
		if len(info.Dead) > 0 && info.OldestPendingIdle > idle || time.Now().After(deadline) {
			break
		}
		time.Sleep(idle / 2)
	}
	if !slices.Equal(info.Dead, []string{"gone"}) {
		t.Fatalf("Dead %v, want [gone] (live holds nothing)", info.Dead)
	}
	for _, c := range info.Consumers {
		if c.Dead != (c.Name == "gone") || (c.Name == "gone" && (c.Pending != 2 || c.Idle <= idle)) {
			t.Fatalf("consumer %+v, want only gone dead, with 2 pending, idle past %s", c, idle)
		}
	}
	if info.OldestPendingIdle <= idle {
		t.Fatalf("OldestPendingIdle %s, want past %s", info.OldestPendingIdle, idle)
	}
}

func TestStreamRefusesBadInputNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.in, Values: []any{"payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	str := b.r.Key("a-string")
	if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	missing := b.r.Key("missing")
	for _, tt := range []struct {
		name, key, group string
		target           error
		names            string
	}{
		{"MissingKey", missing, b.group, admin.ErrKeyNotFound, missing},
		{"WrongType", str, b.group, admin.ErrWrongType, str},
		{"MissingGroup", b.in, "nobody", admin.ErrGroupNotFound, "nobody"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.insp.Stream(b.ctx, tt.key, tt.group)
			if !errors.Is(err, tt.target) || !contains(err, tt.names) {
				t.Fatalf("Stream(%q, %q) = %v, want %v naming %q", tt.key, tt.group, err, tt.target, tt.names)
			}
		})
	}
}
