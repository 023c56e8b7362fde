package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/delayed"
)

// waitBound bounds every wait of these tests; nothing is slept.
const waitBound = 20 * time.Second

// Refund is the refunds example's message.
type Refund struct {
	AmountCents uint64 `msgpack:"amount_cents"`
	Card        string `msgpack:"card"`
	ID          uint64 `msgpack:"id"`
}

// The refunds seeded, by card, as the refunds example's processor answers them: ok is
// acked; unavailable fails every delivery (dead-lettered at the cap of 3); busy waits
// an hour in the delay set; closed fails once on a mount with no cap (dead-lettered at
// once, another reason).
var (
	okCards          = []string{"4000-ok-1", "4000-ok-2"}
	unavailableCards = []string{"4111-unavail-1", "4111-unavail-2", "4111-unavail-3"}
	busyCards        = []string{"4222-busy-1"}
	closedCards      = []string{"4333-closed-1", "4333-closed-2"}
)

// The dead letters of the seed, by reason.
const (
	deadCapped = 3 // "max attempts reached (3 of 3)"
	deadNoCap  = 2 // "failed with no attempts cap declared"
	deadTotal  = deadCapped + deadNoCap
)

// world is one test's Redis (miniredis, or the real server SETTLE_REDIS_URL names,
// under keys of the test's own hash tag) holding the refunds of the seed.
type world struct {
	ctx     context.Context
	dead    string
	delayed string
	group   string
	in      string
	prefix  string
	rdb     *redis.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := "{console-" + hex.EncodeToString(b[:]) + "}"
	w := &world{ctx: context.Background(), group: "refunds", prefix: tag, in: tag + ":refunds", dead: tag + ":refunds.dlq", delayed: tag + ":refunds.delayed"}
	if u := os.Getenv("SETTLE_REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatalf("SETTLE_REDIS_URL=%q: %v", u, err)
		}
		w.rdb = redis.NewClient(opt)
		t.Cleanup(w.deleteKeys(t))
	} else {
		mr := miniredis.RunT(t)
		w.rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = w.rdb.Close() })
	}
	if err := w.rdb.Ping(w.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// deleteKeys deletes the test's keys, and only those (never FLUSHDB), then closes the
// client.
func (w *world) deleteKeys(t *testing.T) func() {
	return func() {
		defer w.rdb.Close()
		keys, err := w.rdb.Keys(w.ctx, w.prefix+"*").Result()
		if err != nil {
			t.Logf("keys %s*: %v", w.prefix, err)
			return
		}
		if len(keys) > 0 {
			_ = w.rdb.Del(w.ctx, keys...).Err()
		}
	}
}

// mount is the world's refunds mount as the console names it.
func (w *world) mount() console.Mount {
	return console.Mount{Name: "refunds", Kind: console.KindStream, Key: w.in, Group: w.group, Delayed: w.delayed, DeadLetter: w.dead}
}

// processor answers a refund as the refunds example's processor does, by card.
func processor(_ context.Context, _ *settle.Message, r Refund) error {
	switch {
	case strings.Contains(r.Card, "unavail"):
		return errors.New("processor unavailable: no answer in 2s")
	case strings.Contains(r.Card, "busy"):
		return settle.RetryAfter(time.Hour, errors.New("processor busy: rate limit spent"))
	case strings.Contains(r.Card, "closed"):
		return errors.New("card account closed")
	}
	return nil
}

// seed publishes the refunds and settles them the real way: first on a mount capped at
// 3 attempts with a durable delay set (ok acked, unavailable dead-lettered, busy
// parked an hour), then the closed cards on a mount with a dead letter and no cap.
func (w *world) seed(t *testing.T) {
	t.Helper()
	pub := settle.NewPublisher(w.rdb)
	id := uint64(0)
	publish := func(cards []string) {
		for _, c := range cards {
			id++
			if _, err := pub.Publish(w.ctx, w.in, Refund{AmountCents: 1000 + id, Card: c, ID: id}, settle.Header("region", "eu")); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(okCards)
	publish(unavailableCards)
	publish(busyCards)
	w.run(t, len(okCards)+len(unavailableCards), len(busyCards), noBackoff, settle.MaxAttempts(3), settle.DeadLetter(w.dead),
		settle.DelayIn(delayed.DurableZset{Key: w.delayed, TTL: 24 * time.Hour}))
	publish(closedCards)
	w.run(t, len(closedCards), 0, noBackoff, settle.DeadLetter(w.dead))
	if n := w.xlen(t, w.dead); n != deadTotal {
		t.Fatalf("the dead-letter stream holds %d after the seed, want %d", n, deadTotal)
	}
}

// run runs an App with the refunds mount (opts added) until finals deliveries are
// settled for good and parks are parked in the delay set.
func (w *world) run(t *testing.T, finals, parks int, opts ...settle.MountOption) {
	t.Helper()
	w.runUntil(t, settle.Typed(processor), finals, parks, opts...)
}

// runWith runs an App with the refunds mount and handler h until finals deliveries are
// settled for good.
func (w *world) runWith(t *testing.T, h settle.Handler, finals int) {
	t.Helper()
	w.runUntil(t, h, finals, 0)
}

func (w *world) runUntil(t *testing.T, h settle.Handler, finals, parks int, opts ...settle.MountOption) {
	t.Helper()
	runApp(t, finals, parks, func(app *settle.App) {
		app.Mount(settle.Stream(w.rdb, w.in, w.group, settle.Block(50*time.Millisecond), settle.Consumer("worker-1")), h, opts...)
	})
}

// noBackoff retries a plain error at once, so the seeds reach their caps quickly.
var noBackoff = settle.Backoff(func(int, error) time.Duration { return 0 })

// runApp runs an App with the mounts mount makes until finals deliveries are settled
// for good and parks are parked in a delay set, then stops it.
func runApp(t *testing.T, finals, parks int, mount func(app *settle.App)) {
	t.Helper()
	var mu sync.Mutex
	nf, np := 0, 0
	done := make(chan struct{})
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case s.Final():
				nf++
			case s.Err == nil && s.Action == settle.ActionPark:
				np++
			default:
				return
			}
			if nf == finals && np == parks {
				close(done)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mount(app)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitBound):
		t.Fatalf("%d final settlements and %d parks not seen within %s", finals, parks, waitBound)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func (w *world) xlen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := w.rdb.XLen(w.ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// deadIDs returns the ids of the dead letters of the world whose reason matches reason.
func (w *world) deadIDs(t *testing.T, reason string) []string {
	t.Helper()
	dls, err := admin.NewInspector(w.rdb).DeadLetters(w.ctx, w.dead, admin.Filter{Reason: reason}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(dls))
	for k, d := range dls {
		ids[k] = d.ID
	}
	return ids
}

// serve starts the console o describes (Admin on the world's Redis, the refunds mount,
// when not given) on an httptest server and returns a client with a cookie jar.
func (w *world) serve(t *testing.T, o console.Options) (*httptest.Server, *http.Client) {
	t.Helper()
	_, srv, cl := w.serveConsole(t, o)
	return srv, cl
}

// serveConsole is serve, returning the console too (to Sample it).
func (w *world) serveConsole(t *testing.T, o console.Options) (*console.Console, *httptest.Server, *http.Client) {
	t.Helper()
	if o.Admin == nil {
		o.Admin = admin.NewInspector(w.rdb)
	}
	if o.Mounts == nil {
		o.Mounts = []console.Mount{w.mount()}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(o.Prefix+"/", c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return c, srv, &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get fetches path and returns the status and body.
func get(t *testing.T, cl *http.Client, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, cl, req)
	return resp.StatusCode, body
}

// post posts the form and returns the status and body.
func post(t *testing.T, cl *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := cl.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmation returns the form a confirmation page sends back (its hidden fields,
// confirm=yes among them), as a person's click sends it.
func confirmation(t *testing.T, body string) url.Values {
	t.Helper()
	form := url.Values{}
	for _, m := range hiddenRe.FindAllStringSubmatch(body, -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	if form.Get("confirm") != "yes" {
		t.Fatalf("the page is no confirmation:\n%s", body)
	}
	return form
}

// addDead writes n dead letters to the world's dead-letter stream as settle writes them
// (reason "failed with no attempts cap declared", error "card account closed").
func (w *world) addDead(t *testing.T, n int) {
	t.Helper()
	for k := 0; k < n; k++ {
		err := w.rdb.XAdd(w.ctx, &redis.XAddArgs{Stream: w.dead, Values: []any{"payload", "late",
			settle.HeaderDeadReason, "failed with no attempts cap declared", settle.HeaderDeadError, "card account closed",
			settle.HeaderDeadSource, w.in, settle.HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano)}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
}

var tokenRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// token returns the CSRF token of a page's forms.
func token(t *testing.T, body string) string {
	t.Helper()
	m := tokenRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the page has no CSRF token in its forms")
	}
	return m[1]
}

// seeded is a world holding the seed, served by the console o describes.
func seeded(t *testing.T, o console.Options) (*world, *httptest.Server, *http.Client) {
	t.Helper()
	w := newWorld(t)
	w.seed(t)
	srv, cl := w.serve(t, o)
	return w, srv, cl
}

// wanderCard is the refund wander publishes: retried twice, parked, then dead-lettered.
const wanderCard = "4555-wander-1"

// wanderer fails a refund of wanderCard as a flaky processor would: again at once on
// its first two attempts, an hour later on its third (parked in the delay set), for
// good on its fourth; any other refund is acked.
func wanderer(_ context.Context, m *settle.Message, r Refund) error {
	if r.Card != wanderCard {
		return nil
	}
	switch m.Attempt {
	case 1, 2:
		return settle.Retry(errors.New("processor busy"))
	case 3:
		return settle.RetryAfter(time.Hour, errors.New("processor down for maintenance"))
	}
	return errors.New("card account closed")
}

// wander publishes a refund of wanderCard and runs the refunds mount (cap 4, the delay
// set, the dead letter) until it is parked, its third attempt failed. It returns the
// refund's id (its origin id) and a function that promotes it and runs the mount until
// its fourth attempt dead-letters it.
func (w *world) wander(t *testing.T) (origin string, deadLetter func()) {
	t.Helper()
	origin, err := settle.NewPublisher(w.rdb).Publish(w.ctx, w.in, Refund{AmountCents: 4555, Card: wanderCard, ID: 4555}, settle.Header("order", "4555"))
	if err != nil {
		t.Fatal(err)
	}
	opts := []settle.MountOption{settle.MaxAttempts(4), settle.DeadLetter(w.dead), settle.DelayIn(delayed.DurableZset{Key: w.delayed, TTL: 24 * time.Hour})}
	w.runUntil(t, settle.Typed(wanderer), 0, 1, opts...)
	return origin, func() {
		t.Helper()
		insp := admin.NewInspector(w.rdb)
		members, err := insp.DelayedMembers(w.ctx, w.delayed, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if m.Headers[settle.HeaderOriginID] == origin {
				if _, err := insp.Promote(w.ctx, w.delayed, admin.DelayFilter{Members: []string{m.Handle}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		w.runUntil(t, settle.Typed(wanderer), 1, 0, opts...)
	}
}
