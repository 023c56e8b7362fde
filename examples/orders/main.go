// Command orders is an orders service whose events must be handled in order per
// customer: a customer's "paid" must not run before its "placed", whichever process
// reads them. It shows settle's partitioned stream and Ordered together:
//
//   - The orders side publishes -n events over -customers customers, each carrying its
//     customer's sequence number, with the Publisher's settle.Key(customer) onto a
//     settle.PartitionedStream of 8 partitions: every event of a customer lands in one
//     partition, FNV-1a(customer) mod 8, in publish order.
//   - -members Apps run in this process, each a member of the group under its own
//     settle.Consumer name (worker-1, worker-2, …), as separate processes would. Each
//     partition is read by one member at a time, under a lease; partitions are spread
//     over the live members.
//   - Each App mounts the stream with settle.Ordered(), Concurrency 8,
//     settle.MaxAttempts(5) and settle.DeadLetter("dead"): a customer's events run one
//     at a time in stream order, different customers in parallel.
//   - The handler fails some first (and a few second) attempts, with settle.Retry (the
//     warehouse did not answer) or settle.RetryAfter (it is busy): the failed event is
//     retried in place, and its customer's later events wait behind it. No event fails
//     a third time, so none reaches the dead letter.
//   - Publishing waits until the partitions are spread over the members (the first to
//     start take them all; the others get theirs at the next lease beats). Once half
//     the events are settled, the last member stops gracefully (-stop) and the others
//     take its partitions over at once (it hands their leases back, entries still
//     waiting for a retry in place included), pending entries first, and carry on in
//     order. It prints the partitions it held and who holds them at the end.
//
// -unordered mounts without settle.Ordered: the same run then lets a customer's later
// events by while an earlier one waits for its retry, and the check counts them.
//
// The handler checks the order with state shared by the members (they are in one
// process): an event is out of order when its customer's previous event has not
// completed yet, or another event of the customer is running. An event handled again
// after it completed (not expected here) is counted apart.
//
// By default it runs on an embedded miniredis, so `go run ./examples/orders` works
// anywhere; -redis URL runs it on a Redis server and -cluster ADDRS (comma-separated) on
// a Redis Cluster, where the 8 partitions spread over the masters. Its keys are the meta
// key "orders", the partitions {orders:0} … {orders:7}, their dead letters
// {orders:i}:dead and leases {orders:i}:lease:fulfilment, and the members
// {orders}:members:fulfilment; it deletes them first and leaves them for inspection.
// Its last line:
//
//	settled N: in order I, out of order O, retried R, members M
//
// where I = N (every event ran after its customer's previous one had completed) and
// O = 0; R counts the failed attempts retried in place.
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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// Event is one event of an order, numbered per customer.
type Event struct {
	Customer string `msgpack:"customer"`
	Kind     string `msgpack:"kind"`
	Order    uint64 `msgpack:"order"`
	Seq      int    `msgpack:"seq"`
}

// kinds are an order's events, in the order a customer's orders go through them.
var kinds = []string{"placed", "paid", "packed", "shipped"}

// The stream, its group, its partitions and its dead-letter key.
const (
	streamName  = "orders"
	group       = "fulfilment"
	partitions  = 8
	deadLetter  = "dead"
	maxAttempts = 5
	concurrency = 8
)

// The warehouse's refusals, which the handler retries in place.
var (
	// errUnavailable: the warehouse did not answer; try again (settle.Retry).
	errUnavailable = errors.New("warehouse unavailable: no answer")
	// errBusy: the warehouse asked to come back later (settle.RetryAfter).
	errBusy = errors.New("warehouse busy")
)

// Warehouse stands in for the system the events are sent to. Its answer is drawn from
// the seed, the customer, the sequence number and the attempt, so one seed fails the
// same attempts whatever the scheduling: 15% of first attempts, a fifth of those again
// on the second, never a third.
type Warehouse struct {
	// Seed chooses the answers.
	Seed uint64
}

// Answer returns nil when the warehouse took the event on attempt (1-based), else
// errUnavailable or errBusy.
func (w Warehouse) Answer(e Event, attempt int) error {
	if attempt > 2 {
		return nil
	}
	h := w.Seed
	for _, c := range []byte(e.Customer) {
		h = h*1099511628211 ^ uint64(c)
	}
	n := mrand.New(mrand.NewPCG(h, uint64(e.Seq)<<8|uint64(attempt))).IntN(100)
	pct := 15
	if attempt == 2 {
		pct = 20
	}
	switch {
	case n < pct/2:
		return errUnavailable
	case n < pct:
		return errBusy
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	backoff   time.Duration
	cluster   string
	customers int
	lease     time.Duration
	members   int
	n         int
	prefix    string
	redis     string
	seed      uint64
	stop      bool
	timeout   time.Duration
	unordered bool
	verbose   bool
}

// parseFlags reads the command line; leftover arguments, counts below one, -redis with
// -cluster and durations that are not positive are refused.
func parseFlags(args []string, stderr io.Writer) (o options, err error) {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.backoff, "backoff", 100*time.Millisecond, "how long a Busy event waits before its retry (RetryAfter)")
	fs.StringVar(&o.cluster, "cluster", "", "Redis Cluster addresses, comma-separated host:port (default: an embedded miniredis)")
	fs.IntVar(&o.customers, "customers", 40, "how many customers the events are spread over")
	fs.DurationVar(&o.lease, "lease", 3*time.Second, "the partition lease TTL (settle.LeaseTTL): members renew every third of it")
	fs.IntVar(&o.members, "members", 3, "how many members (Apps, each its own Consumer name) read the stream")
	fs.IntVar(&o.n, "n", 400, "how many events to publish")
	fs.StringVar(&o.prefix, "prefix", "", "prefix of the stream's name (for tests)")
	fs.StringVar(&o.redis, "redis", "", "a Redis URL, e.g. redis://127.0.0.1:6379/0 (default: an embedded miniredis)")
	fs.Uint64Var(&o.seed, "seed", 6, "seed of the warehouse's answers")
	fs.BoolVar(&o.stop, "stop", true, "stop the last member gracefully once half the events are settled (needs -members 2 or more)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up if the events are not all settled by then")
	fs.BoolVar(&o.unordered, "unordered", false, "mount without settle.Ordered, to see the check catch what Ordered prevents")
	fs.BoolVar(&o.verbose, "v", false, "log settle's Info lines (partitions taken and handed over)")
	if err = fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case o.n < 1:
		err = fmt.Errorf("-n %d: publish at least one event", o.n)
	case o.customers < 1:
		err = fmt.Errorf("-customers %d: at least one customer", o.customers)
	case o.members < 1:
		err = fmt.Errorf("-members %d: at least one member", o.members)
	case o.redis != "" && o.cluster != "":
		err = errors.New("-redis and -cluster: give one")
	case o.backoff <= 0 || o.lease <= 0 || o.timeout <= 0:
		err = errors.New("-backoff, -lease and -timeout must be positive")
	case strings.ContainsAny(o.prefix, "{}"):
		err = fmt.Errorf("-prefix %q: no braces (each partition's hash tag is made from the name)", o.prefix)
	}
	return o, err
}

// connect returns a client on the cluster at addrs, the server at url, or an embedded
// miniredis when both are empty, and a function that closes them.
func connect(ctx context.Context, url, addrs string) (redis.UniversalClient, func(), error) {
	var rdb redis.UniversalClient
	var closeAll func()
	switch {
	case addrs != "":
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
		rdb, closeAll = c, func() { _ = c.Close() }
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis %q: %w", url, err)
		}
		c := redis.NewClient(opt)
		rdb, closeAll = c, func() { _ = c.Close() }
	default:
		mr, err := miniredis.Run()
		if err != nil {
			return nil, nil, fmt.Errorf("start embedded redis: %w", err)
		}
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		return c, func() { _ = c.Close(); mr.Close() }, nil
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("ping: %w", err)
	}
	return rdb, closeAll, nil
}

// Keys returns every key a run on the stream name makes: the meta key, each partition's
// stream, dead letters and lease, and the group's members. They lie in several hash
// slots: delete them one at a time on a cluster.
func Keys(name string) []string {
	ks := []string{name, "{" + name + "}:members:" + group}
	for i := range partitions {
		p := fmt.Sprintf("{%s:%d}", name, i)
		ks = append(ks, p, p+":"+deadLetter, p+":lease:"+group)
	}
	return ks
}

// ledger is the members' shared record of what ran: the order check and the counts.
type ledger struct {
	changed chan struct{} // signalled on every final settlement

	mu         sync.Mutex
	last       map[string]int      // customer -> the last sequence number completed
	running    map[string]int      // customer -> how many of its events are running
	outOfOrder map[string]bool     // "customer/seq" of the events that ran out of order
	completed  map[string]bool     // "customer/seq" of the events whose handler succeeded
	settled    map[string]struct{} // partition + message key of the messages settled for good
	retried    int                 // failed attempts, retried in place
	again      int                 // runs of an event after it completed
	dead       int                 // dead letters
}

func newLedger() *ledger {
	return &ledger{changed: make(chan struct{}, 1), last: map[string]int{}, running: map[string]int{},
		outOfOrder: map[string]bool{}, completed: map[string]bool{}, settled: map[string]struct{}{}}
}

// handler is every member's handler: it checks that e is its customer's next event and
// that no other event of the customer runs, then sends it to the warehouse.
func (l *ledger) handler(w Warehouse, backoff time.Duration) func(context.Context, *settle.Message, Event) error {
	return func(_ context.Context, m *settle.Message, e Event) error {
		id := fmt.Sprintf("%s/%d", e.Customer, e.Seq)
		l.mu.Lock()
		switch {
		case l.completed[id]:
			l.again++
		case e.Seq != l.last[e.Customer]+1 || l.running[e.Customer] > 0:
			l.outOfOrder[id] = true
		}
		l.running[e.Customer]++
		l.mu.Unlock()

		err := w.Answer(e, m.Attempt)

		l.mu.Lock()
		defer l.mu.Unlock()
		l.running[e.Customer]--
		if err != nil {
			l.retried++
			if errors.Is(err, errBusy) {
				return settle.RetryAfter(backoff, err)
			}
			return settle.Retry(err)
		}
		l.completed[id] = true
		l.last[e.Customer] = max(l.last[e.Customer], e.Seq)
		return nil
	}
}

// onSettled counts each message settled for good once, whichever member settled it.
func (l *ledger) onSettled(_ context.Context, s settle.Settled) {
	if !s.Final() {
		return
	}
	l.mu.Lock()
	// A message key is an entry id, unique in its partition's stream only: two
	// partitions may hold the same id.
	l.settled[s.Key+" "+s.MessageKey] = struct{}{}
	if s.Action == settle.ActionDeadLetter {
		l.dead++
	}
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// count returns how many messages are settled for good.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.settled)
}

// summary is the last line.
func (l *ledger) summary(members int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	inOrder := 0
	for id := range l.completed {
		if !l.outOfOrder[id] {
			inOrder++
		}
	}
	return fmt.Sprintf("settled %d: in order %d, out of order %d, retried %d, members %d", len(l.settled), inOrder, len(l.outOfOrder), l.retried, members)
}

// owners follows settle's Info lines about partitions ("settle: partition taken",
// "handed over", "lease lost") to tell which member holds each, and passes every line
// on to the handler that prints the logs.
type owners struct {
	next slog.Handler
	st   *ownerState
}

type ownerState struct {
	changed chan struct{} // signalled on every partition taken

	mu    sync.Mutex
	owner map[int]string   // partition -> member holding it
	taken map[int][]string // partition -> members that took it, in order
}

func (h owners) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo || h.next.Enabled(ctx, level)
}

func (h owners) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "settle: partition ") {
		part, member := -1, ""
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "partition":
				part = int(a.Value.Int64())
			case "member":
				member = a.Value.String()
			}
			return true
		})
		h.st.mu.Lock()
		switch r.Message {
		case "settle: partition taken":
			h.st.owner[part] = member
			h.st.taken[part] = append(h.st.taken[part], member)
			select {
			case h.st.changed <- struct{}{}:
			default:
			}
		default: // handed over, lease lost
			if h.st.owner[part] == member {
				delete(h.st.owner, part)
			}
		}
		h.st.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h owners) WithAttrs(attrs []slog.Attr) slog.Handler {
	return owners{next: h.next.WithAttrs(attrs), st: h.st}
}

func (h owners) WithGroup(name string) slog.Handler {
	return owners{next: h.next.WithGroup(name), st: h.st}
}

// held returns the partitions member holds.
func (s *ownerState) held(member string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []int
	for p, m := range s.owner {
		if m == member {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// spread reports whether every partition is held and by at least want members.
func (s *ownerState) spread(want int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	holders := map[string]bool{}
	for _, m := range s.owner {
		holders[m] = true
	}
	return len(s.owner) == partitions && len(holders) >= want
}

// holders returns who holds each of ps now ("-": nobody yet).
func (s *ownerState) holders(ps []int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%d→%s", p, cmpOr(s.owner[p], "-"))
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// member is one App of the group, running until its stop is called.
type member struct {
	name string
	stop context.CancelFunc
	ran  chan error
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	st := &ownerState{changed: make(chan struct{}, 1), owner: map[int]string{}, taken: map[int][]string{}}
	logger := slog.New(owners{next: slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}), st: st})

	rdb, closeRedis, err := connect(ctx, o.redis, o.cluster)
	if err != nil {
		return err
	}
	defer closeRedis()

	name := o.prefix + streamName
	// The run's own keys, emptied so that it counts only its own events; one DEL each,
	// as they lie in several slots.
	for _, k := range Keys(name) {
		if err := rdb.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("empty %s: %w", k, err)
		}
	}
	stream := func(consumer string) *settle.PartitionedStreamSource {
		return settle.PartitionedStream(rdb, name, group, settle.Partitions(partitions), settle.Consumer(consumer),
			settle.LeaseTTL(o.lease), settle.Block(100*time.Millisecond))
	}
	l := newLedger()
	w := Warehouse{Seed: o.seed}

	opts := []settle.MountOption{settle.Name("orders"), settle.Concurrency(concurrency),
		settle.MaxAttempts(maxAttempts), settle.DeadLetter(deadLetter)}
	if !o.unordered {
		opts = append(opts, settle.Ordered())
	}
	apps := make([]*settle.App, o.members)
	for i := range apps {
		app, err := settle.New(settle.Config{Logger: logger, Hooks: settle.Hooks{Settled: l.onSettled}})
		if err != nil {
			return err
		}
		app.Mount(stream(fmt.Sprintf("worker-%d", i+1)), settle.Typed(l.handler(w, o.backoff)), opts...)
		if err := app.Validate(); err != nil {
			return err
		}
		apps[i] = app
	}
	runCtx, cancelAll := context.WithCancel(ctx)
	defer cancelAll()
	members := make([]*member, o.members)
	for i, app := range apps {
		mctx, stop := context.WithCancel(runCtx)
		m := &member{name: fmt.Sprintf("worker-%d", i+1), stop: stop, ran: make(chan error, 1)}
		go func() { m.ran <- app.Run(mctx) }()
		members[i] = m
	}
	// stopAll stops the members still running and returns their errors.
	stopAll := func() error {
		cancelAll()
		var errs []error
		for _, m := range members {
			if m.ran != nil {
				errs = append(errs, <-m.ran)
				m.ran = nil
			}
		}
		return errors.Join(errs...)
	}

	// The first members to start take every partition; the others get theirs at the next
	// beats (every third of -lease), once the first hand them back. Publishing waits for
	// that (at most three lease TTLs), so that every member reads from the start: until
	// every partition is held, by as many members as can hold one, and none was taken
	// for a beat.
	beat := o.lease/3 + o.lease/10
	quiet := time.NewTimer(beat)
	defer quiet.Stop()
	spreadBy := time.NewTimer(3 * o.lease)
	defer spreadBy.Stop()
wait:
	for {
		select {
		case <-st.changed:
			quiet.Reset(beat)
		case <-quiet.C:
			if st.spread(min(o.members, partitions)) {
				break wait
			}
			quiet.Reset(beat)
		case <-spreadBy.C:
			break wait
		case <-ctx.Done():
			return errors.Join(ctx.Err(), stopAll())
		}
	}
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	fmt.Fprintf(stdout, "partitions: %s\n", strings.Join(st.holders(all), ", "))

	// Publish: the layout is declared first (a keyed publish needs it recorded).
	if err := stream("publisher").Declare(ctx); err != nil {
		return errors.Join(err, stopAll())
	}
	pub := settle.NewPublisher(rdb)
	seq := map[string]int{}
	for i := range o.n {
		c := fmt.Sprintf("customer-%d", i%o.customers+1)
		seq[c]++
		e := Event{Customer: c, Kind: kinds[(seq[c]-1)%len(kinds)], Order: uint64((seq[c]-1)/len(kinds) + 1), Seq: seq[c]}
		if _, err := pub.Publish(ctx, name, e, settle.Key(c)); err != nil {
			return errors.Join(fmt.Errorf("publish %s #%d: %w", c, e.Seq, err), stopAll())
		}
	}
	fmt.Fprintf(stdout, "published %d events of %d customers to %q (%d partitions), read by %d members\n", o.n, min(o.customers, o.n), name, partitions, o.members)

	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	stopping := o.stop && o.members > 1
	var gone []int // the stopped member's partitions
	for l.count() < o.n {
		if stopping && l.count() >= o.n/2 {
			stopping = false
			m := members[len(members)-1]
			held, at := st.held(m.name), l.count()
			m.stop()
			if err := <-m.ran; err != nil {
				return errors.Join(fmt.Errorf("%s: %w", m.name, err), stopAll())
			}
			m.ran = nil
			gone = held
			line := fmt.Sprintf("%s stopped gracefully at %d settled, holding partitions %v", m.name, at, held)
			if kept := st.held(m.name); len(kept) > 0 {
				// A graceful stop hands every lease back; a crash would leave them to run
				// out (-lease).
				line += fmt.Sprintf(" (%v not handed back)", kept)
			}
			fmt.Fprintln(stdout, line)
			continue
		}
		select {
		case <-l.changed:
		case <-deadline.C:
			return errors.Join(fmt.Errorf("timed out after %s: %s", o.timeout, l.summary(o.members)), stopAll())
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("interrupted: %s", l.summary(o.members)), stopAll())
		}
		for _, m := range members {
			select {
			case err := <-m.ran:
				m.ran = nil
				return errors.Join(fmt.Errorf("%s stopped early: %v (%s)", m.name, err, l.summary(o.members)), stopAll())
			default:
			}
		}
	}
	if len(gone) > 0 {
		fmt.Fprintf(stdout, "its partitions at the end: %s\n", strings.Join(st.holders(gone), ", "))
	}
	if err := stopAll(); err != nil {
		return err
	}
	l.mu.Lock()
	again, dead := l.again, l.dead
	l.mu.Unlock()
	if again > 0 || dead > 0 {
		fmt.Fprintf(stdout, "handled again after completing: %d; dead-lettered: %d\n", again, dead)
	}
	fmt.Fprintln(stdout, l.summary(o.members))
	return nil
}
