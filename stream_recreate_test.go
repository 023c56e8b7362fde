package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestStreamRecreatedGroupStartsAfterTheLastDeliveredEntryWhateverStartAt: a group
// destroyed under a running consumer created at "$" is made again from the last entry
// the consumer was delivered, not at "$": the entries written while it was missing are
// all delivered, the one already settled is not delivered again, and an Error says so.
func TestStreamRecreatedGroupStartsAfterTheLastDeliveredEntryWhateverStartAt(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	if err := b.R.Client.XGroupCreateMkStream(ctx, b.In, b.Group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	sourcetest.RunApp(t, b.App(t, b.Stream(settle.StartAt("$")), sourcetest.Ack, settle.Concurrency(1)))
	first := b.Publish(t, "first", nil)
	sourcetest.WaitFinals(t, b.Rec, 1)

	// The group goes and entries come in one step: the consumer meets NOGROUP only
	// once they are all in the stream.
	var later []*redis.StringCmd
	if _, err := b.R.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XGroupDestroy(ctx, b.In, b.Group)
		for i := range 5 {
			later = append(later, p.XAdd(ctx, &redis.XAddArgs{Stream: b.In, Values: []any{"payload", i}}))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{first}
	for _, c := range later {
		want = append(want, c.Val())
	}
	evs := sourcetest.WaitFinals(t, b.Rec, len(want))
	if got := sourcetest.FinalIDs(evs); !slices.Equal(got, want) {
		t.Fatalf("settled %v, want %v: every entry written while the group was missing, none twice", got, want)
	}
	logs := b.Logs.Containing("created it again")
	if len(logs) != 1 || logs[0].Level != slog.LevelError || logs[0].Attrs["from"] != first {
		t.Fatalf("logs %+v, want one Error saying the group was created again from %s", logs, first)
	}
}

// TestASettlementOfAnEntryDeliveredBeforeItsGroupWasMadeAgainSaysSo: Redis lost the
// stream and its group (a restart that wiped its data, here a DEL) while a handler ran;
// the consumer made them again and reads on. The settlement of the entry it held
// writes nothing (no group holds it pending now), and its error says the group was
// made again, not that another consumer took the entry over. The entry written after
// the wipe is delivered and settled on its own even when its id is the held entry's (a
// stream written again restarts its ids: in the same millisecond, the same id; the new
// group once skipped it, and the held entry's retry once landed on it).
func TestASettlementOfAnEntryDeliveredBeforeItsGroupWasMadeAgainSaysSo(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		if first.CompareAndSwap(false, true) {
			close(started)
			<-release
			return errors.New("fails after the wipe")
		}
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.Concurrency(2), settle.MaxAttempts(3)))
	b.Publish(t, "held", nil)
	<-started
	held, err := b.R.Client.XRange(ctx, b.In, "-", "+").Result()
	if err != nil || len(held) != 1 {
		t.Fatalf("the stream before the wipe: %v, %v; want the held entry", held, err)
	}
	if err := b.R.Client.Del(ctx, b.In).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(sourcetest.WaitBound); len(b.Logs.Containing("created them again")) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not make its stream and group again")
		}
	}
	// The new stream's first entry takes the held entry's id, as one written in the
	// same millisecond would.
	after, err := b.R.Client.XAdd(ctx, &redis.XAddArgs{Stream: b.In, ID: held[0].ID, Values: held[0].Values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	evs := sourcetest.WaitFinals(t, b.Rec, 1)
	if got := sourcetest.FinalIDs(evs); !slices.Equal(got, []string{after}) {
		t.Fatalf("settled %v, want %v: the entry written after the wipe", got, after)
	}
	var failed *settle.Settled
	b.Rec.WaitFor(t, sourcetest.WaitBound, "the held entry's settlement", func(evs []settle.Settled) bool {
		for _, ev := range evs {
			if ev.Err != nil {
				failed = &ev
			}
		}
		return failed != nil
	})
	if failed == nil || !strings.Contains(failed.Err.Error(), "made again") || strings.Contains(failed.Err.Error(), "took it over") || strings.Contains(failed.Err.Error(), "claimed") {
		t.Fatalf("the held entry's settlement: %+v; want an error saying its group was made again", failed)
	}
}
