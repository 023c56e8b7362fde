package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

// summary is the parsed last line of a run.
type summary struct{ n, acked, dropped, dead, reviewed int }

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), reviewed ([0-9]+)$`)

// runCmd runs the command with args and returns its parsed last line.
func runCmd(t *testing.T, args ...string) summary {
	t.Helper()
	return runObservedCmd(t, nil, args...)
}

// runObservedCmd runs the command with args, calling observe with every settlement, and
// returns its parsed last line.
func runObservedCmd(t *testing.T, observe func(context.Context, settle.Settled), args ...string) summary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := runObserved(context.Background(), args, &stdout, &stderr, observe); err != nil {
		t.Fatalf("run %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	m := summaryRE.FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line %q does not match %s", last, summaryRE)
	}
	var v [5]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	s := summary{v[0], v[1], v[2], v[3], v[4]}
	if s.acked+s.dropped+s.dead != s.n {
		t.Fatalf("%q: acked + dropped + dead-lettered = %d, want %d", last, s.acked+s.dropped+s.dead, s.n)
	}
	if s.reviewed != s.dead {
		t.Fatalf("%q: reviewed %d, want dead-lettered %d", last, s.reviewed, s.dead)
	}
	return s
}

// expected plays the processor's answers for refunds 1..n the way the mount settles
// them: the first OK acks, the first Declined drops, five failures dead-letter.
func expected(seed uint64, n int) summary {
	p := Processor{Seed: seed}
	s := summary{n: n}
	for id := uint64(1); id <= uint64(n); id++ {
		for attempt := 1; attempt <= maxAttempts; attempt++ {
			a := p.Answer(id, attempt)
			if a == OK {
				s.acked++
				break
			}
			if a == Declined {
				s.dropped++
				break
			}
			if attempt == maxAttempts {
				s.dead++
			}
		}
	}
	s.reviewed = s.dead
	return s
}

// retries counts the retries the mount asks for with refunds 1..n before their final
// settlement: busy ones (RetryAfter) and unavailable ones (Retry). A failure at the
// fifth attempt is a dead letter, not a retry.
func retries(seed uint64, n int) (busy, unavailable int) {
	p := Processor{Seed: seed}
	for id := uint64(1); id <= uint64(n); id++ {
		for attempt := 1; attempt < maxAttempts; attempt++ {
			a := p.Answer(id, attempt)
			if a == Busy {
				busy++
			} else if a == Unavailable {
				unavailable++
			} else {
				break
			}
		}
	}
	return busy, unavailable
}

// modes are the values of -delay.
var modes = []string{delayInProcess, delayZset, delayClaiming}

// recorder keeps the settlements of one run and the first problem an observer saw.
type recorder struct {
	mu      sync.Mutex
	actions map[settle.Action]int // of the refunds mount
	problem string
}

func newRecorder() *recorder { return &recorder{actions: map[settle.Action]int{}} }

func (r *recorder) count(s settle.Settled) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Mount == mountRefunds && s.Err == nil {
		r.actions[s.Action]++
	}
}

func (r *recorder) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.problem == "" {
		r.problem = fmt.Sprintf(format, args...)
	}
}

func (r *recorder) check(t *testing.T) map[settle.Action]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.problem != "" {
		t.Fatal(r.problem)
	}
	return r.actions
}

// pending reports whether the entry id of stream key is pending in group.
func pending(ctx context.Context, rdb redis.UniversalClient, key, group, id string) (bool, error) {
	p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: id, End: id, Count: 1}).Result()
	return len(p) == 1, err
}

// redisURL is the URL of r's server.
func redisURL(r *settletest.Server) string {
	if u := os.Getenv(settletest.EnvRedisURL); u != "" {
		return u
	}
	return "redis://" + r.Mini.Addr()
}

func TestDefaultRunDeadLettersSomeRefundsAndReviewsThemAll(t *testing.T) {
	t.Parallel()
	got := runCmd(t) // embedded miniredis, 200 refunds, default seed
	want := expected(2, 200)
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got.dead == 0 {
		t.Fatalf("got no dead letters with the default seed; the demo should show some: %+v", got)
	}
}

func TestSettlementsFollowTheProcessorsAnswersInEveryDelayMode(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			for _, seed := range []uint64{1, 7, 42} {
				t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) {
					t.Parallel()
					// A claiming stream's backoff is its min-idle, and its heartbeat beats a
					// third of it: a handler's entry starved of CPU for longer than the
					// min-idle is claimed back while it runs (one more delivery counted, so
					// an earlier dead letter than the processor's answers say). 250ms keeps
					// that away on a loaded machine under the race detector; the other
					// modes' backoff is only a delay.
					backoff := "30ms"
					if mode == "claiming" {
						backoff = "250ms"
					}
					got := runCmd(t, "-delay", mode, "-n", "120", "-seed", strconv.FormatUint(seed, 10), "-backoff", backoff)
					if want := expected(seed, 120); got != want {
						t.Fatalf("got %+v, want %+v", got, want)
					}
				})
			}
		})
	}
}

func TestDeadLettersCarryRetryCountAndDeadLetterHeadersInEveryDelayMode(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testDeadLetters(t, mode)
		})
	}
}

func testDeadLetters(t *testing.T, mode string) {
	r := settletest.Redis(t)
	got := runCmd(t, "-redis", redisURL(r), "-prefix", r.Prefix, "-delay", mode, "-seed", "2", "-backoff", "30ms")
	if want := expected(2, 200); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	ctx := context.Background()
	refunds, dlq := r.Key(keyRefunds), r.Key(keyDLQ)

	entries, err := r.Client.XRange(ctx, dlq, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != got.dead || got.dead == 0 {
		t.Fatalf("got %d dead letters in %s, want %d (and more than none)", len(entries), dlq, got.dead)
	}
	for _, e := range entries {
		field := func(name string) string {
			v, _ := e.Values[name].(string)
			return v
		}
		if v := field(settle.HeaderRetryCount); v != strconv.Itoa(maxAttempts) {
			t.Errorf("entry %s: %s = %q, want %d", e.ID, settle.HeaderRetryCount, v, maxAttempts)
		}
		if v := field(settle.HeaderDeadSource); v != refunds {
			t.Errorf("entry %s: %s = %q, want %q", e.ID, settle.HeaderDeadSource, v, refunds)
		}
		if v := field(settle.HeaderDeadID); !regexp.MustCompile(`^[0-9]+-[0-9]+$`).MatchString(v) {
			t.Errorf("entry %s: %s = %q, want a stream entry id", e.ID, settle.HeaderDeadID, v)
		}
		if v := field(settle.HeaderDeadReason); !strings.Contains(v, "max attempts") {
			t.Errorf("entry %s: %s = %q, want the attempts cap named", e.ID, settle.HeaderDeadReason, v)
		}
		if v := field(settle.HeaderDeadError); !strings.Contains(v, "processor") {
			t.Errorf("entry %s: %s = %q, want the processor's last refusal", e.ID, settle.HeaderDeadError, v)
		}
		if field(headerBatch) == "" {
			t.Errorf("entry %s: header %s missing: headers must arrive as they were published", e.ID, headerBatch)
		}
		var refund Refund
		if err := msgpack.Unmarshal([]byte(field("payload")), &refund); err != nil || refund.ID == 0 {
			t.Errorf("entry %s: payload does not decode to a refund (%+v): %v", e.ID, refund, err)
		}
	}

	n, err := r.Client.Exists(ctx, r.Key(keyDelayed)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%s exists after the run, want it gone (empty)", r.Key(keyDelayed))
	}
	for _, kg := range [][2]string{{refunds, groupRefunds}, {dlq, groupReview}} {
		p, err := r.Client.XPending(ctx, kg[0], kg[1]).Result()
		if err != nil {
			t.Fatalf("xpending %s %s: %v", kg[0], kg[1], err)
		}
		if p.Count != 0 {
			t.Errorf("xpending %s %s: got %d pending entries, want 0", kg[0], kg[1], p.Count)
		}
	}
}

// The observation tests use a backoff of a second: long enough that a delay cannot come
// due between its settlement and the observer's look at Redis.
const watchBackoff = "1s"

func TestZsetDelaysWaitInTheDelaySetThatEndsEmpty(t *testing.T) {
	t.Parallel()
	r := settletest.Redis(t)
	refunds, delayedKey := r.Key(keyRefunds), r.Key(keyDelayed)
	rec := newRecorder()
	got := runObservedCmd(t, func(ctx context.Context, s settle.Settled) {
		rec.count(s)
		if s.Mount != mountRefunds || s.Action != settle.ActionPark || s.Err != nil {
			return
		}
		// The copy waits in the delay set, and the original was acked in the same script.
		if n, err := r.Client.ZCard(ctx, delayedKey).Result(); err != nil || n == 0 {
			rec.fail("after parking %s: ZCARD %s = %d (%v), want at least 1", s.ID, delayedKey, n, err)
		}
		if p, err := pending(ctx, r.Client, refunds, groupRefunds, s.ID); err != nil || p {
			rec.fail("after parking %s: the original is still pending (%v), want it acked", s.ID, err)
		}
	}, "-redis", redisURL(r), "-prefix", r.Prefix, "-delay", delayZset, "-n", "80", "-seed", "5", "-backoff", watchBackoff)
	if want := expected(5, 80); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	actions := rec.check(t)
	busy, unavailable := retries(5, 80)
	if busy == 0 {
		t.Fatalf("seed 5 gives no busy refund among 80; pick another seed")
	}
	if actions[settle.ActionPark] != busy || actions[settle.ActionCopy] != unavailable {
		t.Fatalf("got %d parks and %d copies, want %d and %d", actions[settle.ActionPark], actions[settle.ActionCopy], busy, unavailable)
	}
	n, err := r.Client.Exists(context.Background(), delayedKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%s exists after the run, want it empty (so gone)", delayedKey)
	}
}

func TestInProcessDelaysKeepTheOriginalPendingAndNoDelaySet(t *testing.T) {
	t.Parallel()
	r := settletest.Redis(t)
	refunds, delayedKey := r.Key(keyRefunds), r.Key(keyDelayed)
	rec := newRecorder()
	got := runObservedCmd(t, func(ctx context.Context, s settle.Settled) {
		rec.count(s)
		if s.Mount != mountRefunds || s.Action != settle.ActionPark || s.Err != nil {
			return
		}
		// The copy waits in this process; the original stays pending until it is written.
		if p, err := pending(ctx, r.Client, refunds, groupRefunds, s.ID); err != nil || !p {
			rec.fail("after parking %s in-process: the original is not pending (%v), want it pending", s.ID, err)
		}
		if n, err := r.Client.Exists(ctx, delayedKey).Result(); err != nil || n != 0 {
			rec.fail("after parking %s in-process: %s exists (%v), want no delay set", s.ID, delayedKey, err)
		}
	}, "-redis", redisURL(r), "-prefix", r.Prefix, "-delay", delayInProcess, "-n", "80", "-seed", "5", "-backoff", watchBackoff)
	if want := expected(5, 80); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	actions := rec.check(t)
	busy, unavailable := retries(5, 80)
	// An in-process delay is reported twice: parked when it starts waiting, then copied
	// (copy written, original acked) when it comes due.
	if actions[settle.ActionPark] != busy || actions[settle.ActionCopy] != busy+unavailable {
		t.Fatalf("got %d parks and %d copies, want %d and %d", actions[settle.ActionPark], actions[settle.ActionCopy], busy, busy+unavailable)
	}
}

func TestClaimingRetriesStayInThePELWithoutCopies(t *testing.T) {
	t.Parallel()
	r := settletest.Redis(t)
	refunds, dlq, delayedKey := r.Key(keyRefunds), r.Key(keyDLQ), r.Key(keyDelayed)
	rec := newRecorder()
	const n = 80
	got := runObservedCmd(t, func(ctx context.Context, s settle.Settled) {
		rec.count(s)
		if s.Mount != mountRefunds || s.Action != settle.ActionLeave || s.Err != nil {
			return
		}
		// A retry leaves the entry where it is: pending in the group, claimed back later.
		if p, err := pending(ctx, r.Client, refunds, groupRefunds, s.ID); err != nil || !p {
			rec.fail("after a retry of %s: the entry is not pending (%v), want it left in the PEL", s.ID, err)
		}
	}, "-redis", redisURL(r), "-prefix", r.Prefix, "-delay", delayClaiming, "-n", strconv.Itoa(n), "-seed", "5", "-backoff", watchBackoff)
	if want := expected(5, n); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	actions := rec.check(t)
	busy, unavailable := retries(5, n)
	if actions[settle.ActionLeave] != busy+unavailable || actions[settle.ActionCopy] != 0 || actions[settle.ActionPark] != 0 {
		t.Fatalf("got %d retries left pending, %d copies and %d parks; want %d, 0 and 0",
			actions[settle.ActionLeave], actions[settle.ActionCopy], actions[settle.ActionPark], busy+unavailable)
	}

	// No copies: the stream holds the n published entries, and every dead letter names one.
	ctx := context.Background()
	entries, err := r.Client.XRange(ctx, refunds, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("%s holds %d entries, want the %d published (a retry writes no copy)", refunds, len(entries), n)
	}
	originals := map[string]bool{}
	for _, e := range entries {
		originals[e.ID] = true
	}
	dead, err := r.Client.XRange(ctx, dlq, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != got.dead || got.dead == 0 {
		t.Fatalf("%s holds %d dead letters, want %d (and more than none)", dlq, len(dead), got.dead)
	}
	for _, e := range dead {
		id, _ := e.Values[settle.HeaderDeadID].(string)
		if !originals[id] {
			t.Errorf("dead letter %s: %s = %q, want one of the published entries' ids", e.ID, settle.HeaderDeadID, id)
		}
		if v, _ := e.Values[settle.HeaderRetryCount].(string); v != strconv.Itoa(maxAttempts) {
			t.Errorf("dead letter %s: %s = %q, want %d (Redis's delivery counter)", e.ID, settle.HeaderRetryCount, v, maxAttempts)
		}
	}
	if p, err := r.Client.XPending(ctx, refunds, groupRefunds).Result(); err != nil || p.Count != 0 {
		t.Fatalf("xpending %s %s after the run: %+v (%v), want 0 pending", refunds, groupRefunds, p, err)
	}
	if x, err := r.Client.Exists(ctx, delayedKey).Result(); err != nil || x != 0 {
		t.Fatalf("%s exists after a claiming run (%v), want no delay set", delayedKey, err)
	}
}

func TestSecondRunOnTheSameKeysCountsOnlyItsOwnRefunds(t *testing.T) {
	t.Parallel()
	r := settletest.Redis(t)
	args := []string{"-redis", redisURL(r), "-prefix", r.Prefix, "-n", "100", "-backoff", "5ms"}
	first := runCmd(t, append(args, "-seed", "3")...)
	// Leave an entry from another writer in the stream as well: the second run must
	// settle it without counting it.
	ctx := context.Background()
	foreign := &redis.XAddArgs{Stream: r.Key(keyRefunds), Values: []any{"note", "written by redis-cli"}}
	if err := r.Client.XAdd(ctx, foreign).Err(); err != nil {
		t.Fatal(err)
	}
	second := runCmd(t, append(args, "-seed", "4")...)
	if want := expected(3, 100); first != want {
		t.Fatalf("first run: got %+v, want %+v", first, want)
	}
	if want := expected(4, 100); second != want {
		t.Fatalf("second run: got %+v, want %+v", second, want)
	}
	n, err := r.Client.XLen(ctx, r.Key(keyDLQ)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The foreign entry has no payload, so it spends its five attempts too: dead-lettered,
	// or, when the second run counted its own refunds first and stopped, still waiting for
	// the attempts it has left: unread or pending in the stream, or parked in the delay set
	// as a retry copy. Either way it is not counted as a refund, and nothing else is dead.
	dead, err := r.Client.XRange(ctx, r.Key(keyDLQ), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	foreignDead := int64(0)
	for _, e := range dead {
		if _, ok := e.Values["note"]; ok {
			foreignDead++
		}
	}
	if want := int64(first.dead+second.dead) + foreignDead; n != want || foreignDead > 1 {
		t.Fatalf("got %d dead letters after both runs (%d of the foreign entry), want %d", n, foreignDead, want)
	}
	if foreignDead == 0 {
		groups, err := r.Client.XInfoGroups(ctx, r.Key(keyRefunds)).Result()
		waiting := int64(0)
		for _, g := range groups {
			if g.Name == groupRefunds {
				waiting = g.Pending + g.Lag
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		parked, err := r.Client.ZCard(ctx, r.Key(keyDelayed)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if waiting+parked == 0 {
			t.Fatalf("the foreign entry is neither dead-lettered nor waiting in the stream or the delay set: groups %+v", groups)
		}
	}
}

func TestRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-n", "0"}, {"-backoff", "0s"}, {"extra"}, {"-nosuchflag"}, {"-delay", "later"}, {"-backoff", "2h"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("run %v: got no error, want one", args)
		}
		if stdout.Len() != 0 {
			t.Errorf("run %v: wrote %q to stdout, want nothing", args, stdout.String())
		}
	}
}

func TestAnswerDependsOnlyOnSeedRefundAndAttempt(t *testing.T) {
	t.Parallel()
	p := Processor{Seed: 9}
	counts := map[Answer]int{}
	for id := uint64(1); id <= 2000; id++ {
		a := p.Answer(id, 1)
		if b := (Processor{Seed: 9}).Answer(id, 1); a != b {
			t.Fatalf("refund %d: got %s then %s for the same seed and attempt", id, a, b)
		}
		counts[a]++
	}
	for _, a := range []Answer{OK, Busy, Unavailable, Declined} {
		if counts[a] == 0 {
			t.Errorf("2000 refunds never got %s: %v", a, counts)
		}
	}
}

// newUntilApp returns an App on one stream with one message published, and a channel
// closed once that message is settled.
func newUntilApp(t *testing.T) (*settle.App, <-chan struct{}) {
	t.Helper()
	r := settletest.Redis(t)
	done := make(chan struct{})
	var once sync.Once
	app, err := settle.New(settle.Config{OnSettled: func(context.Context, settle.Settled) { once.Do(func() { close(done) }) }})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(r.Client, r.Key("in"), "g", settle.Block(50*time.Millisecond)),
		settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	if _, err := settle.NewPublisher(r.Client).Publish(context.Background(), r.Key("in"), 1); err != nil {
		t.Fatal(err)
	}
	return app, done
}

func TestUntilStopsTheAppGracefullyOnceDone(t *testing.T) {
	t.Parallel()
	app, done := newUntilApp(t)
	if err := runUntil(context.Background(), app, done, time.Minute, func() string { return "s" }); err != nil {
		t.Fatalf("runUntil = %v, want nil", err)
	}
}

func TestUntilNamesTheSummaryWhenInterrupted(t *testing.T) {
	t.Parallel()
	app, _ := newUntilApp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := runUntil(ctx, app, make(chan struct{}), time.Minute, func() string { return "settled 3 of 5" })
	if err == nil || !strings.Contains(err.Error(), "interrupted: settled 3 of 5") {
		t.Fatalf("runUntil = %v, want an error naming the summary", err)
	}
}

func TestUntilReportsAnAppThatStoppedEarly(t *testing.T) {
	t.Parallel()
	app, err := settle.New(settle.Config{}) // no mounts: Run refuses at once
	if err != nil {
		t.Fatal(err)
	}
	err = runUntil(context.Background(), app, make(chan struct{}), time.Minute, func() string { return "settled 0" })
	if err == nil || !strings.Contains(err.Error(), "app stopped early") || !strings.Contains(err.Error(), "no mounts") {
		t.Fatalf("runUntil = %v, want \"app stopped early\" with Run's refusal", err)
	}
}
