package settle_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

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
