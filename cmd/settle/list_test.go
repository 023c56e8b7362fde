package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/wire"
)

// runApp runs an App with the one mount src (handler h, opts) until finals messages
// are settled for good, then stops it.
func (b *testBundle) runApp(t *testing.T, src settle.Source, h settle.Handler, finals int, opts ...settle.MountOption) {
	t.Helper()
	runUntilSettled(t, finals, func(app *settle.App) { app.Mount(src, h, opts...) })
}

// listDeadLetters publishes the payments to the list b.in and runs a List mount
// (MaxAttempts(2), DeadLetter to the list b.dlq) with the failing handler: b.dlq then
// holds deadTotal dead letters, made the real way.
func (b *testBundle) listDeadLetters(t *testing.T) {
	t.Helper()
	pub := settle.NewPublisher(b.rdb)
	id := 0
	for _, cards := range [][]string{okCards, unavailableCards, declinedCards} {
		for _, c := range cards {
			id++
			if err := pub.PublishList(b.ctx, b.in, payment{Card: c, ID: id}, settle.Headers(map[string]string{"region": "eu"})); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.runApp(t, settle.List(b.rdb, b.in, settle.Block(50*time.Millisecond)), failing, published,
		settle.MaxAttempts(2), settle.DeadLetter(b.dlq), settle.Backoff(func(int, error) time.Duration { return 0 }))
	if n := b.llen(t, b.dlq); n != deadTotal {
		t.Fatalf("the dead-letter list holds %d after the run, want %d", n, deadTotal)
	}
}

func (b *testBundle) llen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := b.rdb.LLen(b.ctx, key).Result()
	if err != nil {
		t.Fatalf("llen %s: %v", key, err)
	}
	return n
}

type listOut struct {
	Consumers []struct {
		Alive      bool   `json:"alive"`
		Name       string `json:"name"`
		Orphaned   bool   `json:"orphaned"`
		Processing int64  `json:"processing"`
	} `json:"consumers"`
	Length     int64    `json:"length"`
	Orphaned   []string `json:"orphaned"`
	Processing int64    `json:"processing"`
}

func TestListLsShowsAReliableListsLiveConsumerAndItsProcessingList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := settle.NewPublisher(b.rdb)
	for n := range 3 {
		if err := pub.PublishList(b.ctx, b.in, n); err != nil {
			t.Fatal(err)
		}
	}
	holding, release := make(chan struct{}, 3), make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		b.runApp(t, settle.ReliableList(b.rdb, b.in, settle.Consumer("c1"), settle.Batch(1)), settle.HandlerFunc(func(ctx context.Context, _ *settle.Message) error {
			holding <- struct{}{}
			<-release
			return nil
		}), 3, settle.Concurrency(1))
	}()
	select {
	case <-holding:
	case <-time.After(waitBound):
		t.Fatal("the consumer never held an item")
	}
	var got listOut
	decode(t, b.ok(t, nil, "list", "ls", b.in, "--json").stdout, &got)
	human := b.ok(t, nil, "list", "ls", b.in).stdout
	close(release)
	<-stopped
	if len(got.Consumers) != 1 || got.Consumers[0].Name != "c1" || !got.Consumers[0].Alive || got.Consumers[0].Orphaned ||
		got.Consumers[0].Processing < 1 || got.Length+got.Processing != 3 || len(got.Orphaned) != 0 {
		t.Fatalf("list ls: %+v; want c1 alive holding at least 1, 3 items in all, none orphaned", got)
	}
	if !strings.Contains(human, "c1") || !strings.Contains(human, "alive") {
		t.Errorf("list ls table:\n%s", human)
	}
}

func TestListDlqLsCountsAListsDeadLettersAndReplayMovesTheMatchingOnesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.listDeadLetters(t)
	var ls lsOut
	decode(t, b.ok(t, nil, "list", "dlq", "ls", b.dlq, "--json").stdout, &ls)
	if ls.Count != deadTotal || counts(ls.ByError)["payment provider unavailable"] != deadUnavailable || counts(ls.BySource)[b.in] != deadTotal {
		t.Fatalf("list dlq ls: %+v; want %d, %d unavailable, all from %s", ls, deadTotal, deadUnavailable, b.in)
	}
	entries := lines[entryOut](t, b.ok(t, nil, "list", "dlq", "ls", b.dlq, "--entries", "--json").stdout)
	if len(entries) != deadTotal || entries[3].ID != "3" || entries[3].Headers[settle.HeaderDeadAt] == "" {
		t.Fatalf("list dlq ls --entries: %+v; want %d named by index, each with its dead-at", entries, deadTotal)
	}
	var rep replayOut
	decode(t, b.ok(t, nil, "list", "dlq", "replay", b.dlq, "--reason", "unavailable", "--yes", "--json").stdout, &rep)
	if len(rep.Replayed) != deadUnavailable || b.llen(t, b.dlq) != deadTotal-deadUnavailable || b.llen(t, b.in) != deadUnavailable {
		t.Fatalf("list dlq replay: %+v (dead letters %d, list %d); want %d moved", rep, b.llen(t, b.dlq), b.llen(t, b.in), deadUnavailable)
	}
	vals, _ := b.rdb.LRange(b.ctx, b.in, 0, -1).Result()
	for _, v := range vals {
		if _, h, _, err := wire.FromEnvelope([]byte(v)); err != nil || h[settle.HeaderRetryCount] != "" || h[admin.HeaderReplayedFrom] == "" {
			t.Fatalf("replayed headers %v (%v); want no retry count, a replayed-from", h, err)
		}
	}
	decode(t, b.ok(t, nil, "list", "dlq", "replay", b.dlq, "--reason", "unavailable", "--yes", "--json").stdout, &rep)
	if len(rep.Replayed) != 0 || b.llen(t, b.in) != deadUnavailable {
		t.Fatalf("second list dlq replay: %+v; want nothing moved", rep)
	}
	var purge struct {
		Deleted int `json:"deleted"`
	}
	decode(t, b.ok(t, nil, "list", "dlq", "purge", b.dlq, "--error", "declined", "--yes", "--json").stdout, &purge)
	if purge.Deleted != deadDeclined || b.llen(t, b.dlq) != 0 {
		t.Fatalf("list dlq purge: %+v (left %d); want %d deleted", purge, b.llen(t, b.dlq), deadDeclined)
	}
}

func TestListDlqReplayWithoutYesAndNoTerminalRefusesAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.listDeadLetters(t)
	b.fails(t, exitError, []string{"--yes"}, "list", "dlq", "replay", b.dlq)
	if n := b.llen(t, b.dlq); n != deadTotal {
		t.Fatalf("the dead-letter list holds %d, want %d: the refusal changed it", n, deadTotal)
	}
}

func TestStatsTellsAReliableListAndADeadLetterList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.listDeadLetters(t)
	if err := settle.NewPublisher(b.rdb).PublishList(b.ctx, b.in, "waiting"); err != nil {
		t.Fatal(err)
	}
	type stat struct {
		DeadLetters *struct {
			Count int `json:"count"`
		} `json:"dead_letters"`
		Kind string   `json:"kind"`
		List *listOut `json:"list"`
	}
	got := lines[stat](t, b.ok(t, nil, "stats", b.in, b.dlq, "--json").stdout)
	if len(got) != 2 || got[0].Kind != kindList || got[0].List == nil || got[0].List.Length != 1 {
		t.Fatalf("stats %s: %+v; want a list of 1", b.in, got)
	}
	if got[1].Kind != kindDeadLetters || got[1].DeadLetters == nil || got[1].DeadLetters.Count != deadTotal {
		t.Fatalf("stats %s: %+v; want %d dead letters", b.dlq, got[1], deadTotal)
	}
	if human := b.ok(t, nil, "stats", b.in, b.dlq).stdout; !strings.Contains(human, "reliable list") || !strings.Contains(human, strconv.Itoa(deadTotal)) {
		t.Errorf("stats table:\n%s", human)
	}
}
