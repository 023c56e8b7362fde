package settle_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// TestStreamRecreatedGroupStartsAfterTheLastDeliveredEntryWhateverStartAt: a group
// destroyed under a running consumer created at "$" is made again from the last entry
// the consumer was delivered, not at "$": the entries written while it was missing are
// all delivered, the one already settled is not delivered again, and an Error says so.
func TestStreamRecreatedGroupStartsAfterTheLastDeliveredEntryWhateverStartAt(t *testing.T) {
	t.Parallel()
	b := setupStream(t)
	ctx := context.Background()
	if err := b.r.Client.XGroupCreateMkStream(ctx, b.in, b.group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	start(t, b.app(t, b.stream(settle.StartAt("$")), ack, settle.Concurrency(1)))
	first := b.publish(t, "first", nil)
	finals(t, b.rec, 1)

	// The group goes and entries come in one step: the consumer meets NOGROUP only
	// once they are all in the stream.
	var later []*redis.StringCmd
	if _, err := b.r.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XGroupDestroy(ctx, b.in, b.group)
		for i := range 5 {
			later = append(later, p.XAdd(ctx, &redis.XAddArgs{Stream: b.in, Values: []any{"payload", i}}))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{first}
	for _, c := range later {
		want = append(want, c.Val())
	}
	evs := finals(t, b.rec, len(want))
	if got := finalIDs(evs); !slices.Equal(got, want) {
		t.Fatalf("settled %v, want %v: every entry written while the group was missing, none twice", got, want)
	}
	logs := b.logs.containing("created it again")
	if len(logs) != 1 || logs[0].level != slog.LevelError || logs[0].attrs["from"] != first {
		t.Fatalf("logs %+v, want one Error saying the group was created again from %s", logs, first)
	}
}
