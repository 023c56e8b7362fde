package script_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

func TestListMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	list := func(t *testing.T, r *redistest.Redis, key string) []string {
		t.Helper()
		got, err := r.Client.LRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("MovesOnlyAnItemStillInTheProcessingList", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, dest := r.Key("proc"), r.Key("dest")
		r.Client.RPush(ctx, proc, "a", "b")
		if errs := script.ListMoves(ctx, r.Client, proc, []script.ListMove{{Dest: dest, Item: "a", Value: []byte("a-copy")}}); errs[0] != nil {
			t.Fatalf("move of a present item: %v", errs[0])
		}
		if errs := script.ListMoves(ctx, r.Client, proc, []script.ListMove{{Dest: dest, Item: "a", Value: []byte("a-again")}}); !errors.Is(errs[0], script.ErrItemGone) {
			t.Fatalf("move of a gone item: %v; want ErrItemGone", errs[0])
		}
		if got := list(t, r, dest); !slices.Equal(got, []string{"a-copy"}) {
			t.Fatalf("destination %q, want only the first move's value: a gone item writes nothing", got)
		}
		if got := list(t, r, proc); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("processing list %q, want [b]", got)
		}
	})

	t.Run("EachMoveOfABatchIsAppliedAndAnsweredOnItsOwn", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, back, dlq := r.Key("proc"), r.Key("list"), r.Key("dlq")
		r.Client.RPush(ctx, proc, "a", "b", "x", "c", "x")
		errs := script.ListMoves(ctx, r.Client, proc, []script.ListMove{
			{Dest: back, Item: "a", Value: []byte("a1")},
			{Dest: dlq, Item: "b", Value: []byte("b-dead")},
			{Dest: back, Item: "gone", Value: []byte("never")},
			{Dest: back, Item: "x", Value: []byte("x1")},
			{Dest: back, Item: "x", Value: []byte("x2")},      // the same item twice: both copies go
			{Dest: back, Item: "a", Value: []byte("a-again")}, // taken by the first move
		})
		want := []error{nil, nil, script.ErrItemGone, nil, nil, script.ErrItemGone}
		for i := range want {
			if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
				t.Fatalf("errors %v, want %v", errs, want)
			}
		}
		if got := list(t, r, back); !slices.Equal(got, []string{"a1", "x1", "x2"}) {
			t.Fatalf("list %q, want [a1 x1 x2]: the applied moves' values, in order", got)
		}
		if got := list(t, r, dlq); !slices.Equal(got, []string{"b-dead"}) {
			t.Fatalf("dead-letter list %q, want [b-dead]", got)
		}
		if got := list(t, r, proc); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("processing list %q, want [c]", got)
		}
	})

	t.Run("WrongTypeDestinationFailsItsMovesAloneNamingTheKey", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, back, dest := r.Key("proc"), r.Key("list"), r.Key("dest")
		r.Client.RPush(ctx, proc, "a", "b")
		r.Client.Set(ctx, dest, "a string", 0)
		errs := script.ListMoves(ctx, r.Client, proc, []script.ListMove{
			{Dest: dest, Item: "a", Value: []byte("x")},
			{Dest: back, Item: "b", Value: []byte("b1")},
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "WRONGTYPE key "+dest) {
			t.Fatalf("move to a string key = %v, want a WRONGTYPE error naming %s", errs[0], dest)
		}
		if errs[1] != nil {
			t.Fatalf("move to a list in the same call = %v, want applied", errs[1])
		}
		if got := list(t, r, proc); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("processing list %q, want [a]: the refused move's item kept", got)
		}
		if got := list(t, r, back); !slices.Equal(got, []string{"b1"}) {
			t.Fatalf("list %q, want [b1]", got)
		}
	})

	t.Run("WrongTypeProcessingListFailsEveryMoveAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		proc, dest := r.Key("proc"), r.Key("dest")
		r.Client.Set(ctx, proc, "a string", 0)
		errs := script.ListMoves(ctx, r.Client, proc, []script.ListMove{
			{Dest: dest, Item: "a", Value: []byte("x")},
			{Dest: dest, Item: "b", Value: []byte("y")},
		})
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE key "+proc) {
				t.Fatalf("move %d = %v, want a WRONGTYPE error naming %s", i, err, proc)
			}
		}
		if n, _ := r.Client.Exists(ctx, dest).Result(); n != 0 {
			t.Fatal("the destination was written")
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
		taken, alive, err := script.RunListRecover(ctx, b.r.Client, keys(b), "1", "a", "i1", "list", "i1+1")
		if err != nil || !alive || taken != nil {
			t.Fatalf("recover of a live consumer: %v, alive %v, %v; want alive and nothing taken", taken, alive, err)
		}
		if l, _ := b.r.Client.LLen(ctx, b.proc).Result(); l != 3 {
			t.Fatalf("processing list holds %d items, want 3 untouched", l)
		}
	})

	t.Run("MovesEachItemWhereGoDecidedAndUnregistersAnEmptiedConsumer", func(t *testing.T) {
		t.Parallel()
		b := setupRecover(t)
		taken, alive, err := script.RunListRecover(ctx, b.r.Client, keys(b), "1", "a",
			"i1", "list", "i1+1", "gone", "list", "never", "i2", "dead", "i2-dead", "i3", "drop", "")
		if err != nil || alive || !slices.Equal(taken, []int{0, 2, 3}) {
			t.Fatalf("recover: %v, alive %v, %v; want positions [0 2 3] taken (the gone one skipped)", taken, alive, err)
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
		taken, alive, err := script.RunListRecover(ctx, b.r.Client, keys(b), "0", "a", "i1", "list", "i1+1")
		if err != nil || alive || !slices.Equal(taken, []int{0}) {
			t.Fatalf("own recovery: %v, alive %v, %v; want position 0 taken", taken, alive, err)
		}
		if in, _ := b.r.Client.SIsMember(ctx, b.consumers, "a").Result(); !in {
			t.Fatal("a consumer with items left was unregistered")
		}
	})

	t.Run("TellsWhichItemsItTookWhenAnotherConsumerTookSomeFirst", func(t *testing.T) {
		t.Parallel()
		b := setupRecover(t)
		b.r.Client.LRem(ctx, b.proc, 1, "i2") // taken by a racing recovery
		taken, _, err := script.RunListRecover(ctx, b.r.Client, keys(b), "1", "a",
			"i1", "list", "i1+1", "i2", "list", "i2+1", "i3", "list", "i3+1")
		if err != nil || !slices.Equal(taken, []int{0, 2}) {
			t.Fatalf("recover: %v, %v; want positions [0 2]", taken, err)
		}
		if got, _ := b.r.Client.LRange(ctx, b.list, 0, -1).Result(); !slices.Equal(got, []string{"i1+1", "i3+1"}) {
			t.Fatalf("list %q, want [i1+1 i3+1]", got)
		}
		taken, _, err = script.RunListRecover(ctx, b.r.Client, keys(b), "1", "a", "i1", "list", "i1+1")
		if err != nil || taken == nil || len(taken) != 0 {
			t.Fatalf("recover of items all gone: %v, %v; want an empty list of positions", taken, err)
		}
	})
}

func TestListTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MovesUpToNFromTheHeadToTheTailOfTheProcessingList", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		key, proc := r.Key("in"), r.Key("proc")
		r.Client.RPush(ctx, key, "a", "b", "c")
		r.Client.RPush(ctx, proc, "old")
		got, err := script.ListTake(ctx, r.Client, key, proc, 2)
		if err != nil || !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("ListTake = %q, %v; want [a b]", got, err)
		}
		if got := lrange(t, r.Client, key); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("list %q, want [c]", got)
		}
		if got := lrange(t, r.Client, proc); !slices.Equal(got, []string{"old", "a", "b"}) {
			t.Fatalf("processing list %q, want [old a b]", got)
		}
		got, err = script.ListTake(ctx, r.Client, key, proc, 10)
		if err != nil || !slices.Equal(got, []string{"c"}) {
			t.Fatalf("ListTake of more than the list holds = %q, %v; want [c]", got, err)
		}
		got, err = script.ListTake(ctx, r.Client, key, proc, 10)
		if err != nil || len(got) != 0 {
			t.Fatalf("ListTake of an empty list = %q, %v; want nothing", got, err)
		}
		r.Client.RPush(ctx, key, "d")
		if got, err := script.ListTake(ctx, r.Client, key, proc, 0); err != nil || len(got) != 0 {
			t.Fatalf("ListTake of 0 items = %q, %v; want nothing", got, err)
		}
		if got := lrange(t, r.Client, key); !slices.Equal(got, []string{"d"}) {
			t.Fatalf("list %q after taking 0, want [d]", got)
		}
	})

	t.Run("AProcessingListOfTheWrongTypeTakesNothing", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		key, proc := r.Key("in"), r.Key("proc")
		r.Client.RPush(ctx, key, "a")
		r.Client.Set(ctx, proc, "x", 0)
		if got, err := script.ListTake(ctx, r.Client, key, proc, 10); err == nil {
			t.Fatalf("ListTake into a string = %q; want an error", got)
		}
		if got := lrange(t, r.Client, key); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("list %q, want [a] untouched", got)
		}
	})
}

// ListDone removes each item once, byte for byte, and answers as an LREM per item
// would, wherever the items sit in the processing list: at its head in order (the
// common case), out of order, twice, gone, or beyond the head the script reads (then
// from the tail: see listDoneModel).
func TestListDoneRemovesEachItemOnceFromTheHeadElseFromTheTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(25, 1))
	r := redistest.New(t)
	for round := range 60 {
		proc := r.Key(fmt.Sprintf("proc%d", round))
		n := rng.IntN(300)
		list := make([]string, n)
		for i := range list {
			list[i] = fmt.Sprintf("v%d", rng.IntN(n/2+1)) // duplicates
		}
		var items []string
		switch round % 3 {
		case 0: // a prefix, in order
			items = slices.Clone(list[:rng.IntN(n+1)])
		case 1: // anywhere, in any order
			for range rng.IntN(n + 1) {
				items = append(items, list[rng.IntN(n)])
			}
		default: // and some that are not there
			for range rng.IntN(40) {
				if rng.IntN(4) == 0 || n == 0 {
					items = append(items, "gone")
				} else {
					items = append(items, list[rng.IntN(n)])
				}
			}
		}
		if n > 0 {
			r.Client.RPush(ctx, proc, anys(list)...)
		}
		want, wantLeft := listDoneModel(list, items)
		removed, err := script.ListDone(ctx, r.Client, proc, items, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(removed, wantLeft) {
			t.Fatalf("round %d: replies %v, want %v", round, removed, wantLeft)
		}
		if got := lrange(t, r.Client, proc); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("round %d: processing list %q, want %q", round, got, want)
		}
	}
}

// listDoneModel is what list_done leaves of the processing list list once items are
// done, and which of them it removed: an item is removed once, byte for byte; those the
// head (the first 2×len(items)+64 entries) holds are taken there, earliest first, and any
// other is taken at its last occurrence (LREM from the tail, where the newest takes are).
func listDoneModel(list, items []string) (left []string, removed []bool) {
	head := min(len(list), 2*len(items)+64)
	wanted := map[string]int{}
	for _, it := range items {
		wanted[it]++
	}
	found, gone := map[string]int{}, make([]bool, len(list))
	for pos := range head {
		if v := list[pos]; wanted[v] > 0 {
			wanted[v]--
			found[v]++
			gone[pos] = true
		}
	}
	for pos, v := range list {
		if !gone[pos] {
			left = append(left, v)
		}
	}
	removed = make([]bool, len(items))
	for i, it := range items {
		if found[it] > 0 {
			found[it]--
			removed[i] = true
		} else {
			for k := len(left) - 1; k >= 0; k-- {
				if left[k] == it {
					left, removed[i] = slices.Delete(left, k, k+1), true
					break
				}
			}
		}
	}
	return left, removed
}

// TestListDoneLooksForAnItemPastTheHeadFromTheTail: an item completed far from the head
// of a long processing list (the head holds deliveries still waiting, such as retries
// waiting out their delay in the process) is looked for from the tail, where the newest
// takes are, not past every waiting item from the head (an LREM from the head made a
// delayed burst quadratic: 390 µs of Redis CPU per message at 50,000).
func TestListDoneLooksForAnItemPastTheHeadFromTheTail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.New(t)
	proc := r.Key("proc")
	var list []string
	for i := range 1000 {
		list = append(list, fmt.Sprintf("waiting%d", i))
	}
	// The same bytes twice: once among the waiting items, once as the newest take.
	list = slices.Insert(list, 500, "done")
	list = append(list, "done", "newest")
	r.Client.RPush(ctx, proc, anys(list)...)
	removed, err := script.ListDone(ctx, r.Client, proc, []string{"done"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := lrange(t, r.Client, proc)
	if !slices.Equal(removed, []bool{true}) || len(got) != len(list)-1 || got[500] != "done" || got[len(got)-1] != "newest" || got[len(got)-2] == "done" {
		t.Fatalf("removed %v; the processing list keeps %d items, at 500 %q, ending %q; want the occurrence nearest the tail removed", removed, len(got), got[500], got[len(got)-2:])
	}
}

// anys returns vs as a []any.
func anys(vs []string) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}
