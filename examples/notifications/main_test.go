package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/wire"
)

// summary is the parsed last line of a run.
type summary struct{ n, acked, dropped, dead int }

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+)$`)

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
	var v [4]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return summary{v[0], v[1], v[2], v[3]}
}

// expected plays the handlers' decisions for n emails and n pushes: an email with no
// address is dropped, a bouncing one dead-lettered after 3 attempts, a transient failure
// acked on its second; a push to an expired device dead-lettered after 2.
func expected(n int) (s summary, deadEmails int) {
	s.n = 2 * n
	for i := 1; i <= n; i++ {
		e := Email{ID: uint64(i), To: "x"}
		if i%7 == 0 {
			e.To = ""
		}
		var err error
		for attempt := 1; attempt <= 3; attempt++ {
			if err = sendEmail(e, attempt); err == nil || settle.OutcomeOf(err).Kind == settle.OutcomeDrop {
				break
			}
		}
		switch {
		case err == nil:
			s.acked++
		case settle.OutcomeOf(err).Kind == settle.OutcomeDrop:
			s.dropped++
		default:
			s.dead++
			deadEmails++
		}
		if sendPush(Push{ID: uint64(i)}) == nil {
			s.acked++
		} else {
			s.dead++
		}
	}
	return s, deadEmails
}

// redisURL is the URL of r's server.
func redisURL(r *redistest.Redis) string {
	if u := os.Getenv(redistest.EnvURL); u != "" {
		return u
	}
	return "redis://" + r.Mini.Addr()
}

func TestDefaultRunSettlesEveryNotificationWithSomeDeadLetters(t *testing.T) {
	t.Parallel()
	got := runCmd(t) // embedded miniredis
	want, _ := expected(60)
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got.acked+got.dropped+got.dead != got.n || got.dead == 0 || got.dropped == 0 {
		t.Fatalf("%+v: want A + D + X = N with some drops and dead letters", got)
	}
}

func TestDeadEmailsLandOnTheDeadLetterListAndNothingIsLeftInFlight(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	got := runCmd(t, "-redis", redisURL(r), "-prefix", r.Prefix, "-n", "30")
	want, deadEmails := expected(30)
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	ctx := context.Background()
	vals, err := r.Client.LRange(ctx, r.Prefix+keyEmailDead, 0, -1).Result()
	if err != nil || len(vals) != deadEmails {
		t.Fatalf("dead-letter list holds %d items (%v), want %d", len(vals), err, deadEmails)
	}
	for _, v := range vals {
		payload, h, ok, err := wire.FromEnvelope([]byte(v))
		if err != nil || !ok {
			t.Fatalf("dead letter is not an envelope: %v", err)
		}
		var e Email
		if err := settle.Msgpack.Unmarshal(payload, &e); err != nil || e.ID%5 != 0 {
			t.Fatalf("dead letter %+v (%v), want a bouncing email", e, err)
		}
		if h[settle.HeaderRetryCount] != "3" || h[settle.HeaderDeadError] != errBounced.Error() {
			t.Fatalf("dead letter headers %v", h)
		}
	}
	if n, _ := r.Client.LLen(ctx, r.Prefix+keyEmail).Result(); n != 0 {
		t.Fatalf("email list holds %d items after the run", n)
	}
	keys, _ := r.Client.Keys(ctx, r.Prefix+"*processing*").Result()
	for _, k := range keys {
		if n, _ := r.Client.LLen(ctx, k).Result(); n != 0 {
			t.Fatalf("processing list %s holds %d items after the run", k, n)
		}
	}
}

func TestRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-n", "0"}, {"extra"}, {"-redis", "not a url"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err == nil {
			t.Fatalf("run %v succeeded, want an error", args)
		}
	}
}
