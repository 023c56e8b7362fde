package sqltest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// hookLink is the header the tests' Move hook adds to what a settlement writes.
const hookLink = settle.HeaderHookPrefix + "link"

// retryParkFail sends each delivery's headers to seen, then retries attempt 1 at once
// (a put-back), parks attempt 2 for an hour (RetryAfter) and fails the rest.
func retryParkFail(seen chan<- map[string]string) settle.Handler {
	return raw(func(_ context.Context, m *settle.Message) error {
		seen <- m.Headers
		switch m.Attempt {
		case 1:
			return settle.Retry(errors.New("again"))
		case 2:
			return settle.RetryAfter(time.Hour, errors.New("later"))
		}
		return errors.New("dead")
	})
}

// runWith is run with cfg's hooks: an App of cfg on the bundle's fake clock and
// recorder, with one mount; it stops after the test.
func (x *testBundle) runWith(t *testing.T, cfg settle.Config, src settle.Source, h settle.Handler, opts ...settle.MountOption) {
	t.Helper()
	cfg.Logger, cfg.OnSettled, cfg.Test = quietLogger(t), x.rec.OnSettled, settle.TestConfig{Clock: x.clock}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(src, h, opts...)
	startApp(t, app)
}

// stampMoves is a Move hook adding hookLink = "<attempt>/<action>".
var stampMoves = settle.Hooks{Move: func(_ context.Context, s settle.Settled, h map[string]string) {
	h[hookLink] = strconv.Itoa(s.Attempt) + "/" + s.Action.String()
}}

// runThroughPark runs x's queue of group with h under MaxAttempts(3) into dead, with
// cfg, until its third delivery settles, advancing the clock past the park.
func runThroughPark(t *testing.T, x *testBundle, cfg settle.Config, group, dead string, h settle.Handler) {
	t.Helper()
	x.runWith(t, cfg, x.ib.Queue(group), h, settle.MaxAttempts(3), settle.DeadLetter(dead))
	x.rec.WaitFor(t, waitLong, "the park", func(evs []settle.Settled) bool { return count(evs, settle.ActionPark) == 1 })
	x.clock.Advance(time.Hour)
	x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
}

// A Move hook's header is written into the row, beside the published ones, on a
// put-back (Retry: the row retried in place), a park (RetryAfter) and the dead letter,
// so each delivery sees what the attempt before it wrote (a tracer's link); settle's
// own headers (retry count, origin id, the dead letter's reason) stay out of the row,
// whose columns hold them.
func TestAMoveHooksHeaderIsWrittenIntoTheRowOnPutBackParkAndDeadLetter(t *testing.T) {
	t.Parallel()
	forEachDeadLetterKind(t, func(t *testing.T, x *testBundle, group, dead string) {
		if _, err := x.ib.PublishBytes(context.Background(), group, []byte("p"), settle.Header("tenant", "acme")); err != nil {
			t.Fatal(err)
		}
		seen := make(chan map[string]string, 3)
		runThroughPark(t, x, settle.Config{Hooks: stampMoves}, group, dead, retryParkFail(seen))
		for attempt, want := range []string{"", "1/put_back", "2/park"} {
			h := <-seen
			if h[hookLink] != want || h["tenant"] != "acme" || h[settle.HeaderRetryCount] != "" || h[settle.HeaderOriginID] != "" {
				t.Fatalf("attempt %d saw headers %v, want tenant and link %q only", attempt+1, h, want)
			}
		}
		if h := headersOf(t, x.ib, dead); h[hookLink] != "3/dead_letter" || h["tenant"] != "acme" || len(h) != 2 {
			t.Fatalf("the dead letter holds headers %v, want tenant and the dead letter's link", h)
		}
	})
}

// Without a Move hook nothing is written into the headers column: the row keeps the
// published headers exactly through a put-back, a park and the dead letter.
func TestWithoutAMoveHookTheRowKeepsItsPublishedHeaders(t *testing.T) {
	t.Parallel()
	forEachDeadLetterKind(t, func(t *testing.T, x *testBundle, group, dead string) {
		if _, err := x.ib.PublishBytes(context.Background(), group, []byte("p"), settle.Header("tenant", "acme")); err != nil {
			t.Fatal(err)
		}
		seen := make(chan map[string]string, 3)
		runThroughPark(t, x, settle.Config{}, group, dead, retryParkFail(seen))
		for attempt := 1; attempt <= 3; attempt++ {
			if h := <-seen; h["tenant"] != "acme" || len(h) != 1 {
				t.Fatalf("attempt %d saw headers %v, want the published ones only", attempt, h)
			}
		}
		if h := headersOf(t, x.ib, dead); h["tenant"] != "acme" || len(h) != 1 {
			t.Fatalf("the dead letter holds headers %v, want the published ones only", h)
		}
	})
}

// An OnDeadLetter hook, moving the dead row with its own SQL, is given the row's headers
// with the dead letter's hook headers, so it can carry a tracer's link along.
func TestAnOnDeadLetterHookIsGivenTheDeadLettersHookHeaders(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{headers: true})
		if _, err := x.ib.PublishBytes(context.Background(), "jobs", []byte("p"), settle.Header("tenant", "acme")); err != nil {
			t.Fatal(err)
		}
		got := make(chan map[string]string, 1)
		moved := inbox.OnDeadLetter(func(_ context.Context, _ inbox.Tx, r inbox.DeadRow) error {
			got <- r.Headers
			return nil // the row stays: this test reads only what the hook is given
		})
		x.runWith(t, settle.Config{Hooks: stampMoves}, x.ib.Queue("jobs", moved), raw(func(context.Context, *settle.Message) error {
			return errors.New("always")
		}), settle.MaxAttempts(1), settle.DeadLetter("archive"))
		x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if h := <-got; h["tenant"] != "acme" || h[hookLink] != "1/dead_letter" || len(h) != 2 {
			t.Fatalf("the OnDeadLetter hook got headers %v, want tenant and the dead letter's link", h)
		}
	})
}
