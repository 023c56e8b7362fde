package redislist_test

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
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// Environment of the helper process that consumes a reliable list and is killed with
// SIGKILL in the middle of its handler.
const (
	envChildRedis     = "SETTLE_TEST_CHILD_REDIS" // a redis:// URL; set only in the child
	envChildKey       = "SETTLE_TEST_CHILD_KEY"
	envChildConsumer  = "SETTLE_TEST_CHILD_CONSUMER"
	envChildHeartbeat = "SETTLE_TEST_CHILD_HEARTBEAT"
	envChildCap       = "SETTLE_TEST_CHILD_CAP"
	envChildDLQ       = "SETTLE_TEST_CHILD_DLQ"
)

// TestReliableListHelperProcess is not a test: it is the consumer process that
// startKilledConsumer runs and kills. It prints "handling <attempt>" once its handler
// holds an item, then blocks until killed.
func TestReliableListHelperProcess(t *testing.T) {
	url := os.Getenv(envChildRedis)
	if url == "" {
		t.Skip("helper process for TestReliableList (runs only when started by it)")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(opt)
	hb, _ := time.ParseDuration(os.Getenv(envChildHeartbeat))
	maxAttempts, _ := strconv.Atoi(os.Getenv(envChildCap))
	app, _ := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler)})
	opts := []settle.MountOption{settle.MaxAttempts(maxAttempts), settle.Concurrency(1)}
	if dlq := os.Getenv(envChildDLQ); dlq != "" {
		opts = append(opts, settle.DeadLetter(dlq))
	}
	app.Mount(settle.ReliableList(rdb, os.Getenv(envChildKey), settle.Consumer(os.Getenv(envChildConsumer)), settle.Heartbeat(hb), settle.Batch(1)),
		settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			fmt.Printf("handling %d\n", m.Attempt)
			select {} // killed here
		}), opts...)
	if err := app.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// childURL is the redis:// URL a helper process connects to for r.
func childURL(r *redistest.Redis) string {
	if r.Mini != nil {
		return "redis://" + r.Mini.Addr()
	}
	return os.Getenv(redistest.EnvURL)
}

// startKilledConsumer runs a consumer of key in a process of its own, waits until its
// handler holds an item, kills it with SIGKILL and returns the attempt it was handling.
func startKilledConsumer(t *testing.T, r *redistest.Redis, key, consumer string, hb time.Duration, maxAttempts int, dlq string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReliableListHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envChildRedis+"="+childURL(r), envChildKey+"="+key, envChildConsumer+"="+consumer,
		envChildHeartbeat+"="+hb.String(), envChildCap+"="+strconv.Itoa(maxAttempts), envChildDLQ+"="+dlq)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "handling ") {
				lines <- sc.Text()
				break
			}
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(2 * sourcetest.WaitTimeout):
	}
	_ = cmd.Process.Kill() // SIGKILL: no drain, no settlement, no goodbye
	_ = cmd.Wait()
	if line == "" {
		t.Fatalf("helper consumer %s never started handling an item", consumer)
	}
	attempt, _ := strconv.Atoi(strings.TrimPrefix(line, "handling "))
	return attempt
}

// expireHeartbeats lets heartbeats of hb expire: miniredis's clock moves only when told.
// On a real server they expire on their own, and recovery runs every hb.
func expireHeartbeats(r *redistest.Redis, hb time.Duration) {
	if r.Mini != nil {
		r.Mini.FastForward(hb + time.Millisecond)
	}
}

func TestReliableList(t *testing.T) {
	t.Parallel()
	const hb = 300 * time.Millisecond

	t.Run("RecoversOrphanOfKilledConsumerCountingTheDelivery", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key := r.Key("jobs")
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, "job-1"); err != nil {
			t.Fatal(err)
		}
		if got := startKilledConsumer(t, r, key, "a", hb, 3, ""); got != 1 {
			t.Fatalf("killed consumer was handling attempt %d, want 1", got)
		}
		orphan := settle.ProcessingList(key, "a")
		if n, _ := r.Client.LLen(ctx, orphan).Result(); n != 1 {
			t.Fatalf("killed consumer's processing list holds %d items, want the orphan", n)
		}
		expireHeartbeats(r, hb)

		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		got := make(chan *settle.Message, 1)
		app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("b"), settle.Heartbeat(hb)), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- m
			return nil
		}), settle.MaxAttempts(3))
		stop := sourcetest.StartApp(t, app)
		rec.WaitFor(t, sourcetest.WaitTimeout, "the recovered item's ack", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		m := <-got
		var s string
		if err := m.Decode(&s); err != nil || s != "job-1" {
			t.Fatalf("recovered %q (%v), want job-1", s, err)
		}
		if m.Attempt != 2 {
			t.Fatalf("recovered item delivered as attempt %d, want 2: the killed delivery counts", m.Attempt)
		}
		if n, _ := r.Client.LLen(ctx, orphan).Result(); n != 0 {
			t.Fatalf("orphaned processing list still holds %d items", n)
		}
		if in, _ := r.Client.SIsMember(ctx, keys.ListConsumers(key), "a").Result(); in {
			t.Fatal("dead consumer still registered")
		}
	})

	t.Run("MessageThatKillsItsWorkerReachesDeadLetterAtCap", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key, dlq := r.Key("jobs"), r.Key("dead")
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, "poison", settle.Headers(map[string]string{"kind": "poison"})); err != nil {
			t.Fatal(err)
		}
		if got := startKilledConsumer(t, r, key, "a1", hb, 2, dlq); got != 1 {
			t.Fatalf("first victim handled attempt %d, want 1", got)
		}
		expireHeartbeats(r, hb)
		// The second consumer recovers the first one's item and dies on it too.
		if got := startKilledConsumer(t, r, key, "a2", hb, 2, dlq); got != 2 {
			t.Fatalf("second victim handled attempt %d, want 2", got)
		}
		expireHeartbeats(r, hb)

		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("b"), settle.Heartbeat(hb)), settle.HandlerFunc(func(context.Context, *settle.Message) error {
			t.Error("the item at its cap was delivered again")
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter(dlq))
		stop := sourcetest.StartApp(t, app)
		kv, err := r.Client.BLPop(ctx, sourcetest.WaitTimeout, dlq).Result()
		if err != nil {
			t.Fatalf("no dead letter: %v", err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		payload, h, _, err := wire.FromEnvelope([]byte(kv[1]))
		if err != nil {
			t.Fatal(err)
		}
		if h["kind"] != "poison" || h[settle.HeaderRetryCount] != "2" || !strings.Contains(h[settle.HeaderDeadError], "never settled") || h[settle.HeaderDeadSource] != key {
			t.Fatalf("dead letter headers %v; want the message's own, retry count 2, the attempts-spent-by-crashes error, source %q", h, key)
		}
		var s string
		if err := settle.Msgpack.Unmarshal(payload, &s); err != nil || s != "poison" {
			t.Fatalf("dead letter payload %q (%v)", s, err)
		}
		if n, _ := r.Client.LLen(ctx, key).Result(); n != 0 {
			t.Fatalf("list holds %d items, want 0", n)
		}
	})

	t.Run("RestartedConsumerRecoversItsOwnProcessingList", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key := r.Key("jobs")
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, "left behind"); err != nil {
			t.Fatal(err)
		}
		// An earlier life of consumer "c" took the item and died; its heartbeat may still live.
		if err := r.Client.LMove(ctx, key, settle.ProcessingList(key, "c"), "LEFT", "RIGHT").Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Client.Set(ctx, keys.ListHeartbeat(key, "c"), "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("c")), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		stop := sourcetest.StartApp(t, app)
		evs := rec.WaitFor(t, sourcetest.WaitTimeout, "an ack", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if evs[0].Attempt != 2 {
			t.Fatalf("attempt %d, want 2", evs[0].Attempt)
		}
	})

	t.Run("RetryWithoutCapMovesTheItemBackAsItIs", func(t *testing.T) {
		t.Parallel()
		r := redistest.New(t)
		ctx := context.Background()
		key := r.Key("jobs")
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, "again"); err != nil {
			t.Fatal(err)
		}
		before, _ := r.Client.LIndex(ctx, key, 0).Result()
		rec := sourcetest.NewRecorder()
		app := sourcetest.NewApp(t, rec, nil)
		seen := make(chan string, 2)
		app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("c")), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			// The second delivery is checked against the bytes the first one left.
			v, _ := r.Client.LIndex(ctx, settle.ProcessingList(key, "c"), 0).Result()
			seen <- v
			if len(seen) == 1 {
				return settle.Retry(errors.New("once more"))
			}
			return nil
		}))
		stop := sourcetest.StartApp(t, app)
		evs := rec.WaitFor(t, sourcetest.WaitTimeout, "put back and ack", func(evs []settle.Settled) bool { return len(evs) == 2 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if evs[0].Action == settle.ActionAck {
			evs[0], evs[1] = evs[1], evs[0] // the put back's event may come second
		}
		if evs[0].Action != settle.ActionPutBack || evs[0].Err != nil {
			t.Fatalf("first settlement %s (%v), want put_back", evs[0].Action, evs[0].Err)
		}
		if evs[1].Attempt != 1 {
			t.Fatalf("second delivery attempt %d, want 1 (put back as it was)", evs[1].Attempt)
		}
		first, second := <-seen, <-seen
		if first != before || second != before {
			t.Fatal("the item's bytes changed on put back")
		}
		for _, k := range []string{key, settle.ProcessingList(key, "c")} {
			if n, _ := r.Client.LLen(ctx, k).Result(); n != 0 {
				t.Fatalf("%s holds %d items after the ack", k, n)
			}
		}
	})
}

// A live ReliableList consumer takes over a dead consumer's items one at a time and runs
// each alone: while one runs, the consumer's processing list holds it only (no other
// item taken over, read ahead or acked and not yet removed) and no other handler runs,
// so a message that kills its process is charged its crash alone. The items published
// beside them flow meanwhile. (The heartbeat is an hour: only the first item comes from
// the keeper's tick, the next ones as each settles.)
func TestReliableListRunsEachItemTakenOverFromADeadConsumerAlone(t *testing.T) {
	t.Parallel()
	const items, fresh, concurrency = 30, 10, 4
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("jobs")
	// A dead consumer left 30 items in its processing list: registered, no heartbeat.
	jobs := make([]string, items)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("job-%02d", i)
	}
	sourcetest.DeadListConsumerLeft(t, r.Client, key, "dead", jobs...)
	for i := range fresh {
		if err := settle.NewPublisher(r.Client).PublishList(ctx, key, fmt.Sprintf("fresh-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}

	rec := sourcetest.NewRecorder()
	app := sourcetest.NewApp(t, rec, nil)
	var mu sync.Mutex
	var running sourcetest.Concurrent
	var problems []string
	handled, attempts := map[string]int{}, map[int]int{}
	app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("live"), settle.Heartbeat(time.Hour)), settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		alone, leave := running.Enter()
		defer leave()
		held, err := r.Client.LLen(ctx, settle.ProcessingList(key, "live")).Result()
		if err != nil {
			return settle.Drop(err)
		}
		var s string
		if err := m.Decode(&s); err != nil {
			return settle.Drop(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(s, "job-") && (!alone || held != 1) {
			problems = append(problems, fmt.Sprintf("%s ran beside others (alone %v, %d items held)", s, alone, held))
		}
		handled[s]++
		attempts[m.Attempt]++
		return nil
	}), settle.Concurrency(concurrency), settle.MaxAttempts(5))
	stop := sourcetest.StartApp(t, app)
	rec.WaitFor(t, sourcetest.WaitTimeout, "every item acked", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == items+fresh })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "; "))
	}
	if len(handled) != items+fresh {
		t.Fatalf("%d distinct items handled, want %d", len(handled), items+fresh)
	}
	for s, n := range handled {
		if n != 1 {
			t.Fatalf("%s handled %d times, want once", s, n)
		}
	}
	if attempts[2] != items || attempts[1] != fresh {
		t.Fatalf("attempts %v, want every taken-over item delivered as attempt 2 (the dead consumer's delivery counts), every fresh one as 1", attempts)
	}
	for _, k := range []string{settle.ProcessingList(key, "dead"), settle.ProcessingList(key, "live")} {
		if n, _ := r.Client.LLen(ctx, k).Result(); n != 0 {
			t.Fatalf("%s holds %d items, want none", k, n)
		}
	}
	if in, _ := r.Client.SIsMember(ctx, keys.ListConsumers(key), "dead").Result(); in {
		t.Fatal("the emptied dead consumer is still registered")
	}
}
