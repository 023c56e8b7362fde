package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

// summary is the parsed last line of a run.
type summary struct{ n, acked, dropped, dead, reviewed int }

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), reviewed ([0-9]+)$`)

// runCmd runs the command with args and returns its parsed last line.
func runCmd(t *testing.T, args ...string) summary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
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

// redisURL is the URL of r's server.
func redisURL(r *redistest.Redis) string {
	if u := os.Getenv(redistest.EnvURL); u != "" {
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

func TestSettlementsFollowTheProcessorsAnswers(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 7, 42} {
		t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) {
			t.Parallel()
			got := runCmd(t, "-n", "120", "-seed", strconv.FormatUint(seed, 10), "-backoff", "5ms")
			if want := expected(seed, 120); got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestDeadLettersCarryRetryCountAndDeadLetterHeaders(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	got := runCmd(t, "-redis", redisURL(r), "-prefix", r.Prefix, "-seed", "2", "-backoff", "5ms")
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

func TestSecondRunOnTheSameKeysCountsOnlyItsOwnRefunds(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
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
	// The foreign entry has no payload, so it spends its five attempts too.
	if want := int64(first.dead + second.dead + 1); n != want {
		t.Fatalf("got %d dead letters after both runs, want %d", n, want)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-n", "0"}, {"-backoff", "0s"}, {"extra"}, {"-nosuchflag"}} {
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
