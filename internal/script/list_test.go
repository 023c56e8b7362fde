package script_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

func TestListMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MovesOnlyAnItemStillInTheProcessingList", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, dest := r.Key("proc"), r.Key("dest")
		r.Client.RPush(ctx, proc, "a", "b")
		n, err := script.ListMove.Run(ctx, r.Client, []string{proc, dest}, "a", "a-copy").Int()
		if err != nil || n != 1 {
			t.Fatalf("move of a present item: %d, %v; want 1", n, err)
		}
		n, err = script.ListMove.Run(ctx, r.Client, []string{proc, dest}, "a", "a-again").Int()
		if err != nil || n != 0 {
			t.Fatalf("move of a gone item: %d, %v; want 0", n, err)
		}
		if got, _ := r.Client.LRange(ctx, dest, 0, -1).Result(); !slices.Equal(got, []string{"a-copy"}) {
			t.Fatalf("destination %q, want only the first move's value: a gone item writes nothing", got)
		}
		if got, _ := r.Client.LRange(ctx, proc, 0, -1).Result(); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("processing list %q, want [b]", got)
		}
	})

	t.Run("WrongTypeDestinationWritesNothing", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, dest := r.Key("proc"), r.Key("dest")
		r.Client.RPush(ctx, proc, "a")
		r.Client.Set(ctx, dest, "a string", 0)
		if err := script.ListMove.Run(ctx, r.Client, []string{proc, dest}, "a", "x").Err(); err == nil {
			t.Fatal("move to a string key succeeded")
		}
		if n, _ := r.Client.LLen(ctx, proc).Result(); n != 1 {
			t.Fatalf("processing list holds %d items, want the item kept", n)
		}
	})
}

func TestListRecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type bundle struct {
		r                              *redistest.Redis
		hb, proc, list, dlq, consumers string
	}
	setupRecover := func(t *testing.T) bundle {
		r := redistest.New(t)
		b := bundle{r: r, hb: r.Key("hb:a"), proc: r.Key("proc:a"), list: r.Key("list"), dlq: r.Key("dlq"), consumers: r.Key("consumers")}
		r.Client.RPush(ctx, b.proc, "i1", "i2", "i3")
		r.Client.SAdd(ctx, b.consumers, "a", "b")
		return b
	}
	keys := func(b bundle) []string { return []string{b.hb, b.proc, b.list, b.dlq, b.consumers} }

	t.Run("LeavesALiveConsumerAlone", func(t *testing.T) {
		t.Parallel()
		b := setupRecover(t)
		b.r.Client.Set(ctx, b.hb, "1", time.Hour)
		n, err := script.ListRecover.Run(ctx, b.r.Client, keys(b), "1", "a", "i1", "list", "i1+1").Int()
		if err != nil || n != -1 {
			t.Fatalf("recover of a live consumer: %d, %v; want -1", n, err)
		}
		if l, _ := b.r.Client.LLen(ctx, b.proc).Result(); l != 3 {
			t.Fatalf("processing list holds %d items, want 3 untouched", l)
		}
	})

	t.Run("MovesEachItemWhereGoDecidedAndUnregistersAnEmptiedConsumer", func(t *testing.T) {
		t.Parallel()
		b := setupRecover(t)
		n, err := script.ListRecover.Run(ctx, b.r.Client, keys(b), "1", "a",
			"i1", "list", "i1+1", "i2", "dead", "i2-dead", "i3", "drop", "", "gone", "list", "never").Int()
		if err != nil || n != 3 {
			t.Fatalf("recover: %d, %v; want 3 items taken (the gone one skipped)", n, err)
		}
		if got, _ := b.r.Client.LRange(ctx, b.list, 0, -1).Result(); !slices.Equal(got, []string{"i1+1"}) {
			t.Fatalf("list %q, want [i1+1]", got)
		}
		if got, _ := b.r.Client.LRange(ctx, b.dlq, 0, -1).Result(); !slices.Equal(got, []string{"i2-dead"}) {
			t.Fatalf("dead-letter list %q, want [i2-dead]", got)
		}
		if in, _ := b.r.Client.SIsMember(ctx, b.consumers, "a").Result(); in {
			t.Fatal("the emptied consumer is still registered")
		}
		if in, _ := b.r.Client.SIsMember(ctx, b.consumers, "b").Result(); !in {
			t.Fatal("another consumer was unregistered")
		}
	})

	t.Run("OwnRecoveryIgnoresTheHeartbeat", func(t *testing.T) {
		t.Parallel()
		b := setupRecover(t)
		b.r.Client.Set(ctx, b.hb, "1", time.Hour)
		n, err := script.ListRecover.Run(ctx, b.r.Client, keys(b), "0", "a", "i1", "list", "i1+1").Int()
		if err != nil || n != 1 {
			t.Fatalf("own recovery: %d, %v; want 1", n, err)
		}
		if in, _ := b.r.Client.SIsMember(ctx, b.consumers, "a").Result(); !in {
			t.Fatal("a consumer with items left was unregistered")
		}
	})
}
