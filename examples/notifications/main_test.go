package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
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
func redisURL(r *settletest.Server) string {
	if u := os.Getenv(settletest.EnvRedisURL); u != "" {
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
	r := settletest.Redis(t)
	got := runCmd(t, "-redis", redisURL(r), "-prefix", r.Prefix, "-n", "30")
	want, deadEmails := expected(30)
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	ctx := context.Background()
	if n, err := r.Client.LLen(ctx, r.Prefix+keyEmailDead).Result(); err != nil || n != int64(deadEmails) {
		t.Fatalf("dead-letter list holds %d items (%v), want %d", n, err, deadEmails)
	}
	// A dead-letter list is an ordinary list: read it back as a service would, through
	// a List mount, which decodes each item's envelope (headers and payload).
	for _, m := range readList(t, r, r.Prefix+keyEmailDead, deadEmails) {
		var e Email
		if err := m.Decode(&e); err != nil || e.ID%5 != 0 {
			t.Fatalf("dead letter %+v (%v), want a bouncing email", e, err)
		}
		if h := m.Headers; h[settle.HeaderRetryCount] != "3" || h[settle.HeaderDeadError] != errBounced.Error() {
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

// readList reads n messages off the list key with an App of its own and returns them.
func readList(t *testing.T, r *settletest.Server, key string, n int) []*settle.Message {
	t.Helper()
	got := make(chan *settle.Message, n)
	app, err := settle.New(settle.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.List(r.Client, key, settle.Block(50*time.Millisecond)), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		got <- m
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var out []*settle.Message
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case m := <-got:
			out = append(out, m)
		case <-timeout:
			t.Fatalf("read %d of the %d items of %s", len(out), n, key)
		}
	}
	return out
}
