package sqltest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/settlekit/settle"
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

// runThroughPark runs x's queue of group with h under MaxAttempts(3) into dead, with
// cfg, until its third delivery settles, advancing the clock past the park.
func runThroughPark(t *testing.T, x *testBundle, cfg settle.Config, group, dead string, h settle.Handler) {
	t.Helper()
	cfg.Logger, cfg.OnSettled, cfg.Test = quietLogger(t), x.rec.OnSettled, settle.TestConfig{Clock: x.clock}
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(x.ib.Queue(group), h, settle.MaxAttempts(3), settle.DeadLetter(dead))
	startApp(t, app)
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
		stamp := settle.Hooks{Move: func(_ context.Context, s settle.Settled, h map[string]string) {
			h[hookLink] = strconv.Itoa(s.Attempt) + "/" + s.Action.String()
		}}
		runThroughPark(t, x, settle.Config{Hooks: stamp}, group, dead, retryParkFail(seen))
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
