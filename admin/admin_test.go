package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/leakcheck"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestMain fails the package when a goroutine outlives the tests (an App's, a pacer's).
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}

// waitBound bounds every wait in these tests; it is never slept.
const waitBound = 10 * time.Second

// testBundle is one test's world: a Redis, the payments stream, its dead-letter stream
// and group, and an Inspector.
type testBundle struct {
	ctx   context.Context
	dlq   string
	group string
	in    string
	insp  *admin.Inspector
	r     *redistest.Redis
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	r := redistest.New(t)
	return &testBundle{
		ctx:   context.Background(),
		dlq:   r.Key("payments.dlq"),
		group: "payments",
		in:    r.Key("payments"),
		insp:  admin.NewInspector(r.Client),
		r:     r,
	}
}

// payment is what the tests publish (msgpack, settle's default codec).
type payment struct {
	Card string `msgpack:"card" json:"card"`
	ID   int    `msgpack:"id" json:"id"`
}

// The payments the tests publish, by how their handler answers. Each dead letter's last
// error is "payment provider unavailable" or "card <number> declined".
var (
	okCards          = []string{"1111", "1112", "1113"}
	unavailableCards = []string{"0001", "0002", "0003", "0004"}
	declinedCards    = []string{"4242", "4243", "5555"}
)

// Counts of the dead letters produced.
const (
	deadUnavailable = 4
	deadDeclined    = 3
	deadTotal       = deadUnavailable + deadDeclined
	published       = 10
	maxAttempts     = 2
)

// failing is the handler of the first run: it acks okCards, and fails every delivery of
// the others (so they reach the cap and are dead-lettered).
var failing = settle.Typed(func(_ context.Context, _ *settle.Message, p payment) error {
	for _, c := range unavailableCards {
		if p.Card == c {
			return errors.New("payment provider unavailable")
		}
	}
	for _, c := range declinedCards {
		if p.Card == c {
			return fmt.Errorf("card %s declined", p.Card)
		}
	}
	return nil
})

// deadLetters publishes the payments and runs an App with a Stream mount (MaxAttempts,
// DeadLetter) and the failing handler until every payment is settled for good: the
// dead-letter stream then holds deadTotal dead letters. Each payment carries a
// "region" header: "eu" for the first of each kind, "us" for the others.
func (b *testBundle) deadLetters(t *testing.T) {
	t.Helper()
	pub := settle.NewPublisher(b.r.Client)
	id := 0
	for _, cards := range [][]string{okCards, unavailableCards, declinedCards} {
		for n, c := range cards {
			id++
			region := "us"
			if n == 0 {
				region = "eu"
			}
			if _, err := pub.Publish(b.ctx, b.in, payment{Card: c, ID: id}, settle.Headers(map[string]string{"region": region})); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	b.run(t, failing, func(evs []settle.Settled) bool { return sourcetest.Finals(evs) >= published })
	if n := b.xlen(t, b.dlq); n != deadTotal {
		t.Fatalf("dead-letter stream holds %d entries after the run, want %d", n, deadTotal)
	}
}

// run runs an App with one Stream mount of b.in (consumer "c1") and handler h until
// done holds for its settlements, then stops it; it returns the settlements.
func (b *testBundle) run(t *testing.T, h settle.Handler, done func([]settle.Settled) bool) []settle.Settled {
	t.Helper()
	rec := sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	src := settle.Stream(b.r.Client, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1"))
	app.Mount(src, h, settle.MaxAttempts(maxAttempts), settle.DeadLetter(b.dlq),
		settle.Backoff(func(int, error) time.Duration { return 0 }))
	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = app.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	}()
	return rec.WaitFor(t, waitBound, "the run's settlements", done)
}

func (b *testBundle) xlen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := b.r.Client.XLen(b.ctx, key).Result()
	if err != nil {
		t.Fatalf("xlen %s: %v", key, err)
	}
	return n
}

func (b *testBundle) entries(t *testing.T, key string) []redis.XMessage {
	t.Helper()
	msgs, err := b.r.Client.XRange(b.ctx, key, "-", "+").Result()
	if err != nil {
		t.Fatalf("xrange %s: %v", key, err)
	}
	return msgs
}
