package admin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// Environment of the helper process that consumes a reliable list and is killed in its
// handler.
const (
	envChildRedis    = "SETTLE_ADMIN_TEST_CHILD_REDIS"
	envChildKey      = "SETTLE_ADMIN_TEST_CHILD_KEY"
	envChildConsumer = "SETTLE_ADMIN_TEST_CHILD_CONSUMER"
)

// childHeartbeat is the killed consumer's heartbeat TTL: long enough that it is still
// alive right after the kill, even on a real server.
const childHeartbeat = 2 * time.Second

// TestReliableListHelperProcess is not a test: it is the consumer killedConsumer runs
// and kills. It prints "handling" once its handler holds an item, then blocks.
func TestReliableListHelperProcess(t *testing.T) {
	url := os.Getenv(envChildRedis)
	if url == "" {
		t.Skip("helper process (runs only when started by killedConsumer)")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	app, _ := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler)})
	app.Mount(settle.ReliableList(redis.NewClient(opt), os.Getenv(envChildKey), settle.Consumer(os.Getenv(envChildConsumer)), settle.Heartbeat(childHeartbeat), settle.Batch(1)),
		settle.HandlerFunc(func(context.Context, *settle.Message) error {
			fmt.Println("handling")
			select {} // killed here
		}), settle.Concurrency(1))
	if err := app.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// killedConsumer runs a consumer of key in a process of its own, waits until its
// handler holds an item and kills it with SIGKILL: its processing list keeps the item.
func killedConsumer(t *testing.T, r *redistest.Redis, key, consumer string) {
	t.Helper()
	url := os.Getenv(redistest.EnvURL)
	if r.Mini != nil {
		url = "redis://" + r.Mini.Addr()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReliableListHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildRedis+"="+url, envChildKey+"="+key, envChildConsumer+"="+consumer)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	handling := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for !found && sc.Scan() {
			found = strings.HasPrefix(sc.Text(), "handling")
		}
		handling <- found
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var ok bool
	select {
	case ok = <-handling:
	case <-time.After(waitBound):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !ok {
		t.Fatalf("helper consumer %s never started handling an item", consumer)
	}
}

func TestReliableListViewShowsEachConsumersProcessingListAliveThenOrphaned(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("jobs")
	pub := settle.NewPublisher(r.Client)
	for n := range 3 {
		if err := pub.PublishList(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	killedConsumer(t, r, key, "a")
	insp := admin.NewInspector(r.Client)

	info, err := insp.ReliableList(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The consumer may have taken more than the item its handler held.
	held := info.Processing
	if held < 1 || info.Length+held != 3 || len(info.Consumers) != 1 || len(info.Orphaned) != 0 {
		t.Fatalf("right after the kill: %+v; want 3 items between the list and a's processing list (at least 1), none orphaned", info)
	}
	processing, _ := r.Client.LLen(ctx, settle.ProcessingList(key, "a")).Result()
	c := info.Consumers[0]
	if c.Name != "a" || !c.Alive || c.Orphaned || c.Processing != processing || c.HeartbeatTTL <= 0 || c.ProcessingKey != settle.ProcessingList(key, "a") {
		t.Fatalf("consumer %+v; want a, alive (its heartbeat not expired yet), the %d items of %s", c, processing, settle.ProcessingList(key, "a"))
	}

	// The heartbeat expires: miniredis's clock moves when told, a real one on its own.
	if r.Mini != nil {
		r.Mini.FastForward(childHeartbeat + time.Millisecond)
	}
	deadline := time.Now().Add(waitBound)
	for {
		if info, err = insp.ReliableList(ctx, key); err != nil {
			t.Fatal(err)
		}
		if len(info.Orphaned) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	c = info.Consumers[0]
	if len(info.Orphaned) != 1 || info.Orphaned[0] != "a" || c.Alive || !c.Orphaned || c.Processing != held || c.HeartbeatTTL != 0 {
		t.Fatalf("after the heartbeat expired: %+v, consumer %+v; want a orphaned holding %d", info, c, held)
	}
}

func TestReliableListViewRefusesAMissingKeyOrOneOfAnotherType(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	insp := admin.NewInspector(r.Client)
	missing, str := r.Key("missing"), r.Key("a-string")
	if err := r.Client.Set(ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.ReliableList(ctx, missing); !errors.Is(err, admin.ErrKeyNotFound) || !contains(err, missing) {
		t.Fatalf("ReliableList(missing) = %v, want ErrKeyNotFound naming it", err)
	}
	if _, err := insp.ReliableList(ctx, str); !errors.Is(err, admin.ErrWrongType) || !contains(err, str) {
		t.Fatalf("ReliableList(string) = %v, want ErrWrongType naming it", err)
	}
	if _, err := insp.ListDeadLetters(ctx, str, admin.Filter{}, 0); !errors.Is(err, admin.ErrWrongType) {
		t.Fatalf("ListDeadLetters(string) = %v, want ErrWrongType", err)
	}
}

// listBundle is a list of payments consumed by a List mount that dead-letters to a list.
type listBundle struct {
	*testBundle
}

// listDeadLetters publishes the payments to the list b.in and runs a List mount
// (MaxAttempts, DeadLetter to the list b.dlq) with the failing handler until each is
// settled: b.dlq then holds deadTotal dead letters.
func listDeadLetters(t *testing.T) *listBundle {
	t.Helper()
	b := &listBundle{setup(t)}
	pub := settle.NewPublisher(b.r.Client)
	id := 0
	for _, cards := range [][]string{okCards, unavailableCards, declinedCards} {
		for n, c := range cards {
			id++
			region := "us"
			if n == 0 {
				region = "eu"
			}
			if err := pub.PublishList(b.ctx, b.in, payment{Card: c, ID: id}, settle.Headers(map[string]string{"region": region})); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.runList(t, failing, published)
	if n := b.llen(t, b.dlq); n != deadTotal {
		t.Fatalf("dead-letter list holds %d, want %d", n, deadTotal)
	}
	return b
}

func (b *listBundle) runList(t *testing.T, h settle.Handler, finals int) {
	t.Helper()
	rec := sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.List(b.r.Client, b.in, settle.Block(50*time.Millisecond)), h, settle.MaxAttempts(maxAttempts), settle.DeadLetter(b.dlq),
		settle.Backoff(func(int, error) time.Duration { return 0 }))
	ctx, cancel := context.WithCancel(b.ctx)
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	rec.WaitFor(t, waitBound, "the run's settlements", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) >= finals })
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func (b *listBundle) llen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := b.r.Client.LLen(b.ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestListDeadLetterSummaryGroupsByReasonNormalisedErrorAndSource(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	s, err := b.insp.ListDeadLetterSummary(b.ctx, b.dlq, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// The dead-at is stamped on the App's clock when a worker decides; concurrent
	// workers push in another order, so the head's dead-at may be a moment after the
	// tail's: both are set, and neither is ordered against the other.
	if s.Count != deadTotal || s.Oldest != "0" || s.Newest != strconv.Itoa(deadTotal-1) || s.OldestAt.IsZero() || s.NewestAt.IsZero() {
		t.Fatalf("summary %+v; want %d, indexes 0 to %d, dated by their dead-at", s, deadTotal, deadTotal-1)
	}
	if len(s.ByError) != 2 || s.ByError[0].Value != "payment provider unavailable" || s.ByError[0].Count != deadUnavailable ||
		s.ByError[1].Value != "card <n> declined" || s.ByError[1].Count != deadDeclined {
		t.Fatalf("ByError %+v; want %d unavailable, %d \"card <n> declined\"", s.ByError, deadUnavailable, deadDeclined)
	}
	if len(s.BySource) != 1 || s.BySource[0].Value != b.in || s.BySource[0].Count != deadTotal {
		t.Fatalf("BySource %+v; want all %d from %s", s.BySource, deadTotal, b.in)
	}
	if len(s.ByReason) != 1 || s.ByReason[0].Count != deadTotal || s.ByReason[0].Value == "" {
		t.Fatalf("ByReason %+v; want one reason for all %d", s.ByReason, deadTotal)
	}
}

func TestListDeadLettersAreDecodedFromTheEnvelopeAndNamedByIndex(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	all, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{}, 0)
	if err != nil || len(all) != deadTotal {
		t.Fatalf("ListDeadLetters = %d, %v; want %d", len(all), err, deadTotal)
	}
	for n, d := range all {
		var p payment
		if err := settle.Msgpack.Unmarshal(d.Payload, &p); err != nil || p.Card == "" {
			t.Fatalf("dead letter %d payload %q: %v", n, d.Payload, err)
		}
		if d.Index != int64(n) || d.ID != strconv.Itoa(n) || d.Time.IsZero() || d.Headers["region"] == "" || d.Headers[settle.HeaderRetryCount] != strconv.Itoa(maxAttempts) {
			t.Fatalf("dead letter %d: %+v; want index and id %d, its dead-at, its region header, retry count %d", n, d, n, maxAttempts)
		}
	}
	declined, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{Error: "declined", Headers: map[string]string{"region": "us"}}, 0)
	if err != nil || len(declined) != deadDeclined-1 {
		t.Fatalf("declined in us: %d, %v; want %d", len(declined), err, deadDeclined-1)
	}
	one, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{IDs: []string{"2"}}, 0)
	if err != nil || len(one) != 1 || one[0].Member != all[2].Member {
		t.Fatalf("IDs [2] = %+v, %v; want index 2", one, err)
	}
	if _, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{IDs: []string{"2", "99"}}, 0); !errors.Is(err, admin.ErrEntryNotFound) || !contains(err, "99") {
		t.Fatalf("IDs [2 99] = %v, want ErrEntryNotFound naming 99", err)
	}
	if _, err := b.insp.ListDeadLetters(b.ctx, b.dlq, admin.Filter{IDs: []string{"1-1"}}, 0); err == nil || !contains(err, "index") {
		t.Fatalf("IDs [1-1] = %v, want an error saying a list member is selected by index", err)
	}
}

func TestReplayListMovesTheSelectionBackOnceWithAttemptsReset(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	f := admin.Filter{Error: "unavailable"}
	dry, err := b.insp.ReplayList(b.ctx, b.dlq, f, admin.DryRun())
	if err != nil || len(dry.Replayed) != deadUnavailable || b.llen(t, b.dlq) != deadTotal {
		t.Fatalf("dry run = %+v, %v; want %d listed and nothing moved", dry, err, deadUnavailable)
	}
	res, err := b.insp.ReplayList(b.ctx, b.dlq, f)
	if err != nil || len(res.Replayed) != deadUnavailable || len(res.Gone) != 0 {
		t.Fatalf("ReplayList = %+v, %v; want %d replayed", res, err, deadUnavailable)
	}
	if n := b.llen(t, b.dlq); n != deadTotal-deadUnavailable {
		t.Fatalf("dead-letter list holds %d after the replay, want %d", n, deadTotal-deadUnavailable)
	}
	vals, err := b.r.Client.LRange(b.ctx, b.in, 0, -1).Result()
	if err != nil || len(vals) != deadUnavailable {
		t.Fatalf("source list holds %d (%v), want the %d replayed", len(vals), err, deadUnavailable)
	}
	for _, v := range vals {
		_, h, _, err := wire.FromEnvelope([]byte(v))
		if err != nil || h[settle.HeaderRetryCount] != "" || h[settle.HeaderDeadError] != "" || !strings.HasPrefix(h[admin.HeaderReplayedFrom], b.dlq+"/") || h["region"] == "" {
			t.Fatalf("replayed headers %v (%v); want no settle header but %s, the region kept", h, err, admin.HeaderReplayedFrom)
		}
	}
	again, err := b.insp.ReplayList(b.ctx, b.dlq, f)
	if err != nil || len(again.Replayed) != 0 || b.llen(t, b.in) != deadUnavailable {
		t.Fatalf("second ReplayList = %+v, %v; want nothing moved", again, err)
	}
	// The replayed messages settle as first attempts: the handler now acks them.
	b.runList(t, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt != 1 {
			t.Errorf("replayed message delivered as attempt %d, want 1", m.Attempt)
		}
		return nil
	}), deadUnavailable)
	if n := b.llen(t, b.dlq); n != deadTotal-deadUnavailable {
		t.Fatalf("dead-letter list holds %d after the replayed ran, want %d", n, deadTotal-deadUnavailable)
	}
}

func TestPurgeListDeletesTheSelectionOnce(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	res, err := b.insp.PurgeList(b.ctx, b.dlq, admin.Filter{Error: "declined"})
	if err != nil || res.Deleted != deadDeclined || len(res.IDs) != deadDeclined {
		t.Fatalf("PurgeList = %+v, %v; want %d deleted", res, err, deadDeclined)
	}
	again, err := b.insp.PurgeList(b.ctx, b.dlq, admin.Filter{Error: "declined"})
	if err != nil || again.Deleted != 0 || b.llen(t, b.dlq) != deadUnavailable {
		t.Fatalf("second PurgeList = %+v, %v (list %d); want nothing more deleted", again, err, b.llen(t, b.dlq))
	}
}

func TestReplayListRefusesADestinationInAnotherSlot(t *testing.T) {
	t.Parallel()
	b := listDeadLetters(t)
	admin.CheckSlots(b.insp)
	other := "{other}" + b.r.Key("in")
	_, err := b.insp.ReplayList(b.ctx, b.dlq, admin.Filter{}, admin.To(other))
	if !errors.Is(err, admin.ErrCrossSlot) || !contains(err, other) || b.llen(t, b.dlq) != deadTotal {
		t.Fatalf("ReplayList to another slot = %v (dead letters %d); want ErrCrossSlot naming %s and no change", err, b.llen(t, b.dlq), other)
	}
}
