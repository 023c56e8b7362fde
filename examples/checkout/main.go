// Command checkout is the shop of seed 004, "Settlement: retry, retry_after, dead
// letter": an orders service publishes a payment request for every order; the payments
// mount charges each through a gateway and replies Paid to the orders side, which
// records the order paid. The gateway answers in one of four ways, each settled
// differently:
//
//   - OK: the charge went through; the handler returns a Paid reply, which is written
//     to payments.paid in the same step as the request's completion (settle.Reply,
//     settle.ReplyTo).
//   - Busy: the gateway's rate limit is spent; the request is retried after one second
//     (settle.RetryAfter).
//   - Unavailable: the gateway did not answer; the request is retried at once
//     (settle.Retry).
//   - Declined: the card has no funds, and asking again gets the same answer; the
//     payment is dropped with a warning (settle.Drop).
//
// A request gets five deliveries, the first included (settle.MaxAttempts(5)); the fifth
// that still fails is dead-lettered to payments.dead. Requests and replies are CBOR on
// the wire (settle/cbor).
//
// By default it runs on settletest's in-memory broker, with no server at all, so `go run
// ./examples/checkout` works anywhere; -redis runs it on Redis instead, on the streams
// {shop}:payments.requested, {shop}:payments.paid and {shop}:payments.dead (one hash
// tag: a reply is one script with the request's stream), which it empties first and
// leaves for inspection. Its last line:
//
//	settled N: paid P, dropped D, dead-lettered X, replies R
//
// where P + D + X = N and R = P: every paid order's reply reached the orders side
// once, and with -redis the reply stream holds exactly R entries.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/cbor"
	"github.com/settlekit/settle/settletest"
)

// PaymentRequest asks the payments side to charge an order.
type PaymentRequest struct {
	AmountCents uint64   `cbor:"amount_cents"`
	Customer    string   `cbor:"customer"`
	Lines       []string `cbor:"lines"`
	Order       uint64   `cbor:"order"`
}

// Paid is the payments side's reply: the order was charged.
type Paid struct {
	Customer string   `cbor:"customer"`
	Lines    []string `cbor:"lines"`
	Order    uint64   `cbor:"order"`
}

// The gateway's refusals, kept in logs and in a dead letter's error header.
var (
	// errBusy: past the rate limit; a charge right now would be refused again.
	errBusy = errors.New("gateway busy: rate limit reached")
	// errUnavailable: no answer; try again at once.
	errUnavailable = errors.New("gateway unavailable: no answer")
	// errDeclined: no funds; asking again gets the same answer.
	errDeclined = errors.New("card declined: insufficient funds")
)

// Gateway stands in for the payment provider. Its answer is drawn from a random source
// seeded with the seed, the order and the attempt, so one seed settles the same orders
// the same way whatever the scheduling.
type Gateway struct {
	// Seed chooses the answers.
	Seed uint64
}

// odds are the gateway's answers (nil: charged) with their weights, in percent: a
// request fails all five attempts with probability 0.45^5 ≈ 2%.
var odds = []struct {
	answer error
	weight int
}{{nil, 50}, {errBusy, 20}, {errUnavailable, 25}, {errDeclined, 5}}

// Charge returns nil once the gateway charged order on the given attempt (1-based),
// else its refusal: errBusy, errUnavailable or errDeclined.
func (g Gateway) Charge(order uint64, attempt int) error {
	n := mrand.New(mrand.NewPCG(g.Seed^order, uint64(attempt))).IntN(100)
	for _, o := range odds {
		if n < o.weight {
			return o.answer
		}
		n -= o.weight
	}
	return errDeclined
}

// charge is the payments subscriber: a Paid reply, or the refusal's outcome.
func charge(g Gateway, backoff time.Duration) func(ctx context.Context, m *settle.Message, req PaymentRequest) (Paid, error) {
	return func(_ context.Context, m *settle.Message, req PaymentRequest) (Paid, error) {
		err := g.Charge(req.Order, m.Attempt)
		switch {
		case err == nil:
			return Paid{Customer: req.Customer, Lines: req.Lines, Order: req.Order}, nil
		case errors.Is(err, errBusy):
			// Past the rate limit: a redelivery right now would be refused again.
			return Paid{}, settle.RetryAfter(backoff, err)
		case errors.Is(err, errUnavailable):
			// No answer: try again at once, up to the attempts cap.
			return Paid{}, settle.Retry(err)
		default:
			// A refused card stays refused.
			return Paid{}, settle.Drop(err)
		}
	}
}

// Topic names, as in the seed; on Redis each carries the {shop} hash tag.
const (
	topicRequested = "payments.requested"
	topicPaid      = "payments.paid"
	topicDead      = "payments.dead"
	maxAttempts    = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	backoff time.Duration
	level   slog.Level
	n       int
	prefix  string
	redis   string
	seed    uint64
	timeout time.Duration
}

// parseFlags reads the command line; an argument left over, no order to place or a
// backoff that is not positive is refused.
func parseFlags(args []string, stderr io.Writer) (o options, err error) {
	fs := flag.NewFlagSet("checkout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.backoff, "backoff", time.Second, "how long a Busy charge waits before its retry")
	fs.TextVar(&o.level, "log", slog.LevelError, "the lowest level logged: DEBUG, INFO, WARN or ERROR")
	fs.IntVar(&o.n, "n", 100, "how many orders to place")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for every Redis key (for tests)")
	fs.StringVar(&o.redis, "redis", "", "a Redis URL to run on (default: the in-memory broker, no server)")
	fs.Uint64Var(&o.seed, "seed", 4, "seed of the gateway's answers")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the orders are not all settled by then")
	if err = fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case o.n < 1:
		err = fmt.Errorf("-n %d: place at least one order", o.n)
	case o.backoff <= 0:
		err = fmt.Errorf("-backoff %s: must be positive", o.backoff)
	}
	return o, err
}

// shop is where the run's messages live: the in-memory broker or Redis.
type shop struct {
	// dead, paid and requested are the three destinations' names.
	dead, paid, requested string
	// place publishes one payment request.
	place func(ctx context.Context, req PaymentRequest) error
	// payments and orders are the two mounts' sources.
	payments, orders settle.Source
	// replies returns how many replies the reply destination holds (Redis: XLEN).
	replies func(ctx context.Context) (int64, error)
}

func memoryShop() *shop {
	b := settletest.NewBroker()
	s := &shop{dead: topicDead, paid: topicPaid, requested: topicRequested}
	s.payments, s.orders = b.Topic(topicRequested), b.Topic(topicPaid)
	s.place = func(_ context.Context, req PaymentRequest) error {
		payload, err := cbor.Codec.Marshal(req)
		if err != nil {
			return err
		}
		b.Topic(topicRequested).Publish(payload, nil)
		return nil
	}
	return s
}

func redisShop(ctx context.Context, rdb redis.UniversalClient, prefix string) (*shop, error) {
	tag := prefix + "{shop}:"
	s := &shop{dead: tag + topicDead, paid: tag + topicPaid, requested: tag + topicRequested}
	// The run's own keys: emptied so the reply stream's length counts this run's replies.
	if err := rdb.Del(ctx, s.dead, s.paid, s.requested).Err(); err != nil {
		return nil, fmt.Errorf("empty the shop's streams: %w", err)
	}
	pub := settle.NewPublisher(rdb, settle.WithCodec(cbor.Codec))
	s.payments = settle.Stream(rdb, s.requested, "payments", settle.Block(100*time.Millisecond))
	s.orders = settle.Stream(rdb, s.paid, "orders", settle.Block(100*time.Millisecond))
	s.place = func(ctx context.Context, req PaymentRequest) error {
		_, err := pub.Publish(ctx, s.requested, req)
		return err
	}
	s.replies = func(ctx context.Context) (int64, error) { return rdb.XLen(ctx, s.paid).Result() }
	return s, nil
}

// tally counts the payments mount's final settlements and the orders recorded paid.
type tally struct {
	changed   chan struct{} // signalled on every count
	requested string        // the payments mount's key

	mu                  sync.Mutex
	paid, dropped, dead int
	recorded            map[uint64]int // order -> times recorded paid
	replies             int
}

func (t *tally) onSettled(_ context.Context, s settle.Settled) {
	if !s.Final() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case s.Key != t.requested:
	case s.Action == settle.ActionReply:
		t.paid++
	case s.Action == settle.ActionDrop:
		t.dropped++
	case s.Action == settle.ActionDeadLetter:
		t.dead++
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// record is the orders side: it records each order paid once.
func (t *tally) record(_ context.Context, _ *settle.Message, p Paid) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recorded[p.Order]++
	t.replies++
	select {
	case t.changed <- struct{}{}:
	default:
	}
	return nil
}

// done reports whether all n orders are settled and every reply recorded.
func (t *tally) done(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.paid+t.dropped+t.dead >= n && t.replies >= t.paid
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level}))

	var s *shop
	if o.redis == "" {
		s = memoryShop()
	} else {
		opt, err := redis.ParseURL(o.redis)
		if err != nil {
			return fmt.Errorf("-redis %q: %w", o.redis, err)
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		if s, err = redisShop(ctx, rdb, o.prefix); err != nil {
			return err
		}
	}
	t := &tally{changed: make(chan struct{}, 1), recorded: map[uint64]int{}, requested: s.requested}
	app, err := settle.New(settle.Config{Logger: logger, OnSettled: t.onSettled})
	if err != nil {
		return err
	}
	app.Mount(s.payments, settle.Reply(charge(Gateway{Seed: o.seed}, o.backoff)),
		settle.Name("payments"), settle.WithCodec(cbor.Codec),
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(s.dead), settle.ReplyTo(s.paid))
	app.Mount(s.orders, settle.Typed(t.record), settle.Name("orders"), settle.WithCodec(cbor.Codec))

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()

	customers := []string{"ada", "grace", "edsger", "barbara"}
	for i := 1; i <= o.n; i++ {
		req := PaymentRequest{AmountCents: uint64(i) * 125, Customer: customers[i%len(customers)], Lines: []string{fmt.Sprintf("item-%d", i)}, Order: uint64(i)}
		if err := s.place(ctx, req); err != nil {
			cancel()
			<-ran
			return fmt.Errorf("place order %d: %w", i, err)
		}
	}
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	for !t.done(o.n) {
		select {
		case <-t.changed:
		case err := <-ran:
			return fmt.Errorf("the app stopped early: %v", err)
		case <-deadline.C:
			cancel()
			<-ran
			return fmt.Errorf("not every order settled within %s", o.timeout)
		case <-ctx.Done():
			cancel()
			<-ran
			return ctx.Err()
		}
	}
	cancel()
	if err := <-ran; err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for order, n := range t.recorded {
		if n != 1 {
			return fmt.Errorf("order %d was recorded paid %d times", order, n)
		}
	}
	if s.replies != nil {
		n, err := s.replies(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("xlen %s: %w", s.paid, err)
		}
		if int(n) != t.replies {
			return fmt.Errorf("%s holds %d replies, the orders side recorded %d", s.paid, n, t.replies)
		}
	}
	fmt.Fprintf(stdout, "settled %d: paid %d, dropped %d, dead-lettered %d, replies %d\n", t.paid+t.dropped+t.dead, t.paid, t.dropped, t.dead, t.replies)
	return nil
}
