package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func newIDs(res *admin.ReplayResult) []string {
	var ids []string
	for _, r := range res.Replayed {
		ids = append(ids, r.NewID)
	}
	return ids
}

func TestReplayMovesExactlyTheMatchingDeadLettersBackOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	lenBefore := b.xlen(t, b.in)
	unavailable, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{Error: "unavailable"}, 0)
	if err != nil || len(unavailable) != deadUnavailable {
		t.Fatalf("DeadLetters(unavailable) = %d, %v", len(unavailable), err)
	}

	f := admin.Filter{Reason: "^max attempts", Error: "unavailable"}
	res, err := b.insp.Replay(b.ctx, b.dlq, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replayed) != deadUnavailable || len(res.Gone) != 0 || res.DryRun {
		t.Fatalf("Replay = %+v, want %d replayed", res, deadUnavailable)
	}
	if got := b.xlen(t, b.dlq); got != deadTotal-deadUnavailable {
		t.Fatalf("dead-letter stream holds %d, want %d", got, deadTotal-deadUnavailable)
	}
	if got := b.xlen(t, b.in); got != lenBefore+deadUnavailable {
		t.Fatalf("source stream holds %d, want %d", got, lenBefore+deadUnavailable)
	}
	for n, r := range res.Replayed {
		d := unavailable[n]
		if r.ID != d.ID || r.To != b.in {
			t.Fatalf("replayed[%d] = %+v, want %s to %s", n, r, d.ID, b.in)
		}
		msgs, err := b.r.Client.XRange(b.ctx, b.in, r.NewID, r.NewID).Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("replayed entry %s: %v, %v", r.NewID, msgs, err)
		}
		v := msgs[0].Values
		if _, ok := v[settle.HeaderRetryCount]; ok {
			t.Fatalf("replayed entry %v carries %s: its attempts would not start again", v, settle.HeaderRetryCount)
		}
		for k := range v {
			if strings.HasPrefix(k, settle.HeaderPrefix) && k != admin.HeaderReplayedFrom {
				t.Fatalf("replayed entry %v carries settle's header %s", v, k)
			}
		}
		if got, want := v[admin.HeaderReplayedFrom], b.dlq+"/"+d.ID; got != want {
			t.Fatalf("%s = %v, want %q", admin.HeaderReplayedFrom, got, want)
		}
		if v["payload"] != string(d.Payload) || v["region"] != d.Headers["region"] {
			t.Fatalf("replayed entry %v, want the dead letter's payload and own headers", v)
		}
	}

	t.Run("AgainMovesNothing", func(t *testing.T) {
		again, err := b.insp.Replay(b.ctx, b.dlq, f)
		if err != nil || len(again.Replayed) != 0 || len(again.Gone) != 0 {
			t.Fatalf("second Replay = %+v, %v; want nothing moved", again, err)
		}
		if b.xlen(t, b.dlq) != deadTotal-deadUnavailable || b.xlen(t, b.in) != lenBefore+deadUnavailable {
			t.Fatal("the second replay changed a stream")
		}
	})

	t.Run("ReplayedMessagesAreAckedByAHandlerThatSucceeds", func(t *testing.T) {
		want := newIDs(res)
		var acked []string
		b.run(t, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), func(evs []settle.Settled) bool {
			acked = acked[:0]
			for _, e := range evs {
				if e.Final() && e.Action == settle.ActionAck && e.Attempt == 1 && slices.Contains(want, e.ID) {
					acked = append(acked, e.ID)
				}
			}
			return len(acked) == len(want)
		})
		info, err := b.insp.Stream(b.ctx, b.in, b.group)
		if err != nil || info.Pending != 0 {
			t.Fatalf("after the acks: %+v, %v; want nothing pending", info, err)
		}
		if b.xlen(t, b.dlq) != deadTotal-deadUnavailable {
			t.Fatal("a replayed message was dead-lettered again")
		}
	})
}

func TestReplayDryRunMovesNothingAndReportsTheSameSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	lenIn := b.xlen(t, b.in)
	f := admin.Filter{Error: "declined"}

	dry, err := b.insp.Replay(b.ctx, b.dlq, f, admin.DryRun())
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || len(dry.Replayed) != deadDeclined {
		t.Fatalf("dry run = %+v, want %d that would move", dry, deadDeclined)
	}
	if b.xlen(t, b.dlq) != deadTotal || b.xlen(t, b.in) != lenIn {
		t.Fatal("the dry run changed a stream")
	}
	moved, err := b.insp.Replay(b.ctx, b.dlq, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved.Replayed) != len(dry.Replayed) {
		t.Fatalf("replay moved %d, the dry run said %d", len(moved.Replayed), len(dry.Replayed))
	}
	for n := range dry.Replayed {
		if d, r := dry.Replayed[n], moved.Replayed[n]; d.ID != r.ID || d.To != r.To || d.NewID != "" {
			t.Fatalf("dry run said %+v, the replay did %+v", d, r)
		}
	}
}

func TestReplayOptionsLimitRateAndTo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	other := b.r.Key("payments.replayed")
	if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: other, Values: []any{"payload", "first"}}).Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("LimitTakesTheOldest", func(t *testing.T) {
		all, _ := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{}, 0)
		res, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{}, admin.Limit(2), admin.To(other))
		if err != nil || len(res.Replayed) != 2 || res.Replayed[0].ID != all[0].ID || res.Replayed[1].ID != all[1].ID {
			t.Fatalf("Replay limit 2 = %+v, %v; want the two oldest", res, err)
		}
		if res.Replayed[0].To != other || b.xlen(t, other) != 3 {
			t.Fatalf("Replay To(%s) wrote to %s (%d entries there)", other, res.Replayed[0].To, b.xlen(t, other))
		}
	})

	t.Run("RateSpacesTheMoves", func(t *testing.T) {
		const rate, n = 100, 3 // n moves: n-1 intervals of 10 ms at least
		start := time.Now()
		res, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{}, admin.Limit(n), admin.Rate(rate), admin.To(other))
		if err != nil || len(res.Replayed) != n {
			t.Fatalf("Replay = %+v, %v", res, err)
		}
		if took, least := time.Since(start), (n-1)*time.Second/rate; took < least {
			t.Fatalf("%d moves at %d/s took %s, want at least %s", n, rate, took, least)
		}
	})

	t.Run("NegativeLimitOrRateIsRefused", func(t *testing.T) {
		for _, o := range []admin.ReplayOption{admin.Limit(-1), admin.Rate(-2)} {
			if _, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{}, o); err == nil || !contains(err, "negative") {
				t.Fatalf("Replay with %T = %v, want it refused", o, err)
			}
		}
	})
}

func TestReplayRefusesADestinationInAnotherSlotBeforeMovingAnything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	other := "{other" + strings.Trim(b.r.Prefix, "{}:") + "}:payments" // another tag, another slot
	if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: other, Values: []any{"payload", "first"}}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.r.Client.Del(context.Background(), other) })
	insp := admin.NewInspector(b.r.Client)
	admin.CheckSlots(insp) // as on a cluster

	_, err := insp.Replay(b.ctx, b.dlq, admin.Filter{}, admin.To(other))
	if !errors.Is(err, admin.ErrCrossSlot) || !contains(err, other) || !contains(err, b.dlq) {
		t.Fatalf("Replay to %s = %v, want ErrCrossSlot naming both keys", other, err)
	}
	if b.xlen(t, b.dlq) != deadTotal || b.xlen(t, other) != 1 {
		t.Fatal("a refused replay moved something")
	}
	if res, err := insp.Replay(b.ctx, b.dlq, admin.Filter{}, admin.Limit(1)); err != nil || len(res.Replayed) != 1 {
		t.Fatalf("Replay to the source, in the slot = %+v, %v", res, err)
	}
}

func TestReplayRefusesBadInputWithNoChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	all := b.entries(t, b.dlq)
	missing := b.r.Key("missing")
	str := b.r.Key("a-string")
	if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		key    string
		f      admin.Filter
		opts   []admin.ReplayOption
		target error
		names  string
	}{
		{"MissingDeadLetterKey", missing, admin.Filter{}, nil, admin.ErrKeyNotFound, missing},
		{"DeadLetterKeyOfWrongType", str, admin.Filter{}, nil, admin.ErrWrongType, str},
		{"AnIDNotFoundAmongFound", b.dlq, admin.Filter{IDs: []string{all[0].ID, "1-1"}}, nil, admin.ErrEntryNotFound, "1-1"},
		{"ReasonDoesNotCompile", b.dlq, admin.Filter{Reason: "("}, nil, nil, `"("`},
		{"MissingDestination", b.dlq, admin.Filter{}, []admin.ReplayOption{admin.To(missing)}, admin.ErrKeyNotFound, missing},
		{"DestinationOfWrongType", b.dlq, admin.Filter{}, []admin.ReplayOption{admin.To(str)}, admin.ErrWrongType, str},
		{"IntoItself", b.dlq, admin.Filter{}, []admin.ReplayOption{admin.To(b.dlq)}, nil, "into itself"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.insp.Replay(b.ctx, tt.key, tt.f, tt.opts...)
			if err == nil || (tt.target != nil && !errors.Is(err, tt.target)) || !contains(err, tt.names) {
				t.Fatalf("Replay = %v, want %v naming %q", err, tt.target, tt.names)
			}
			if tt.opts == nil { // a purge has no destination: the other refusals are its too
				if _, err := b.insp.Purge(b.ctx, tt.key, tt.f); err == nil || !contains(err, tt.names) {
					t.Fatalf("Purge = %v, want it refused naming %q", err, tt.names)
				}
			}
			if got := b.entries(t, b.dlq); len(got) != len(all) {
				t.Fatalf("dead-letter stream holds %d, want %d: bad input changed it", len(got), len(all))
			}
		})
	}
}

func TestPurgeDeletesTheSelectionOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	f := admin.Filter{Source: b.in, Error: "declined"}

	dry, err := b.insp.Purge(b.ctx, b.dlq, f, admin.DryRun())
	if err != nil || !dry.DryRun || len(dry.IDs) != deadDeclined || dry.Deleted != 0 || b.xlen(t, b.dlq) != deadTotal {
		t.Fatalf("dry Purge = %+v, %v; want %d selected and nothing deleted", dry, err, deadDeclined)
	}
	some, err := b.insp.Purge(b.ctx, b.dlq, f, admin.Limit(2))
	if err != nil || some.Deleted != 2 || !slices.Equal(some.IDs, dry.IDs[:2]) {
		t.Fatalf("Purge limit 2 = %+v, %v; want the two oldest of %v", some, err, dry.IDs)
	}
	rest, err := b.insp.Purge(b.ctx, b.dlq, f)
	if err != nil || rest.Deleted != 1 {
		t.Fatalf("Purge of the rest = %+v, %v; want 1", rest, err)
	}
	again, err := b.insp.Purge(b.ctx, b.dlq, f)
	if err != nil || again.Deleted != 0 || len(again.IDs) != 0 {
		t.Fatalf("Purge again = %+v, %v; want nothing", again, err)
	}
	if got := b.xlen(t, b.dlq); got != deadUnavailable {
		t.Fatalf("dead-letter stream holds %d, want the %d unavailable ones", got, deadUnavailable)
	}
}
