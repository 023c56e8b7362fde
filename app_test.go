package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// configErrors returns the *ConfigErrors joined in err.
func configErrors(t *testing.T, err error) []*settle.ConfigError {
	t.Helper()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %v (%T) does not join refusals", err, err)
	}
	var out []*settle.ConfigError
	for _, e := range joined.Unwrap() {
		var ce *settle.ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("refusal %v (%T) is not a *ConfigError", e, e)
		}
		out = append(out, ce)
	}
	return out
}

func TestAppValidateReportsEveryRefusal(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	app, err := settle.New(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(b.Stream(), nil, settle.Name("nil-handler"))
	app.Mount(b.Stream(), settle.HandlerFunc(nil), settle.Name("nil-func"))
	app.Mount(b.Stream(), settle.Typed[string](nil), settle.Name("nil-typed"))
	app.Mount(b.Stream(), settle.Reply[string, string](nil), settle.Name("nil-reply"))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("no-concurrency"), settle.Concurrency(0))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("negative-cap"), settle.MaxAttempts(-1))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("no-prefetch-bytes"), settle.PrefetchBytes(0))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("zero-cap"), settle.MaxAttempts(0))
	app.Mount(settle.List(b.Client, b.In+":list"), sourcetest.Ack, settle.Name("trimmed-list-dlq"), settle.DeadLetter(b.DLQ), settle.DeadLetterMaxLen(10))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("dlq-is-source"), settle.DeadLetter(b.In))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("twice"))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("twice"))
	app.Mount(settle.List(b.Client, b.In+":wait-list"), sourcetest.Ack, settle.Name("wait-on-a-list"), settle.WaitReplicas(1, time.Second))
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("wait-forever"), settle.WaitReplicas(1, 0))

	err = app.Validate()
	if err == nil {
		t.Fatal("Validate = nil, want every refusal")
	}
	want := map[string]string{
		"nil-handler":       "handler is nil",
		"nil-func":          "handler is nil",
		"nil-typed":         "handler is nil",
		"nil-reply":         "handler is nil",
		"no-concurrency":    "Concurrency(0)",
		"negative-cap":      "MaxAttempts(-1)",
		"no-prefetch-bytes": "PrefetchBytes(0): must be positive",
		"zero-cap":          "MaxAttempts(0): the cap must be at least 1",
		"trimmed-list-dlq":  "DeadLetterMaxLen(10): only a stream's dead letters can be trimmed",
		"dlq-is-source":     b.In,
		"twice":             "name",
		"wait-on-a-list":    "WaitReplicas: only a stream or reliable list mount's settlements are Redis writes to wait for, not a list source's",
		"wait-forever":      "WaitReplicas(…, 0s): the timeout must be at least 1ms",
	}
	refusals := configErrors(t, err)
	if len(refusals) != len(want) {
		t.Fatalf("%d refusals, want %d: %v", len(refusals), len(want), err)
	}
	for _, ce := range refusals {
		frag, ok := want[ce.Mount]
		if !ok {
			t.Fatalf("refusal %q names mount %q, want one of the bad mounts", ce, ce.Mount)
		}
		if !strings.Contains(ce.Problem, frag) || !strings.Contains(ce.Error(), ce.Mount) {
			t.Fatalf("refusal %q, want it to name mount %q and say %q", ce, ce.Mount, frag)
		}
		delete(want, ce.Mount)
	}
	if len(want) != 0 {
		t.Fatalf("no refusal for %v", want)
	}
}

// A mount without settle.Name is named "<kind> <key>[/<group>]" in every line and event,
// its transport's own lines included (a subscription's log line once said mount=#1).
func TestDefaultMountNameIsUsedByTheTransportsLogLines(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	channel := b.In + ":events"
	app := b.App(t, settle.PubSub(b.Client, channel), sourcetest.Ack)
	app.Mount(b.Stream(), sourcetest.Ack)
	sourcetest.RunApp(t, app)
	b.Cmds.WaitFor(t, "the stream's first read, after every mount opened", func(c sourcetest.RecordedCmd) bool { return c.Name() == "xreadgroup" })
	subscribed := b.Logs.Containing("settle: subscribed")
	if len(subscribed) != 1 || subscribed[0].Attrs["mount"] != "channel "+channel {
		t.Fatalf("subscription log lines %+v, want one with mount=%q", subscribed, "channel "+channel)
	}
}

func TestNewPublisherSkipsANilOption(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	pub := settle.NewPublisher(b.Client, nil, settle.WithCodec(settle.JSON), nil)
	if _, err := pub.Publish(context.Background(), b.In, map[string]int{"a": 1}); err != nil {
		t.Fatalf("Publish = %v", err)
	}
}

func TestAppRunWithInvalidConfigStartsNothing(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	app := b.App(t, b.Stream(), sourcetest.Ack, settle.Concurrency(0))
	err := app.Run(context.Background())
	var ce *settle.ConfigError
	if !errors.As(err, &ce) || ce.Mount == "" {
		t.Fatalf("Run = %v, want the *ConfigError of the mount", err)
	}
	if n := len(b.Cmds.Named("xgroup")) + len(b.Cmds.Named("xreadgroup")); n != 0 {
		t.Fatalf("%d commands sent, want none: validation comes before anything starts", n)
	}
	if err := app.Run(context.Background()); !errors.Is(err, settle.ErrAppClosed) {
		t.Fatalf("second Run = %v, want ErrAppClosed", err)
	}
}

func TestAppSecondRunReturnsErrAppClosed(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	app := b.App(t, b.Stream(), sourcetest.Ack)
	stop := sourcetest.RunApp(t, app)
	b.Cmds.WaitFor(t, "a read", func(c sourcetest.RecordedCmd) bool { return c.Name() == "xreadgroup" })
	if err := app.Run(context.Background()); !errors.Is(err, settle.ErrAppClosed) {
		t.Fatalf("Run while running = %v, want ErrAppClosed", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := app.Run(context.Background()); !errors.Is(err, settle.ErrAppClosed) {
		t.Fatalf("Run after Run = %v, want ErrAppClosed", err)
	}
}

func TestAppRunWithNoMountsIsRefused(t *testing.T) {
	t.Parallel()
	app, err := settle.New(settle.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = app.Run(context.Background())
	var ce *settle.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no mounts") {
		t.Fatalf("Run = %v, want a *ConfigError saying there are no mounts", err)
	}
}

func TestNewRefusesNegativeDrainTimeout(t *testing.T) {
	t.Parallel()
	app, err := settle.New(settle.Config{DrainTimeout: -time.Second})
	var ce *settle.ConfigError
	if app != nil || !errors.As(err, &ce) || !strings.Contains(ce.Problem, "DrainTimeout") {
		t.Fatalf("New = %v, %v; want nil and a *ConfigError naming DrainTimeout", app, err)
	}
}

func TestAppRefusesClusterDeadLetterInAnotherSlot(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"127.0.0.1:1"},
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("test: validation must not dial")
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })

	t.Run("DifferentSlotsAreRefused", func(t *testing.T) {
		in, dlq := "orders:in", "orders:dlq"
		if keys.Slot(in) == keys.Slot(dlq) {
			t.Fatalf("test premise: %s and %s share a slot", in, dlq)
		}
		app, err := settle.New(settle.Config{})
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(settle.Stream(rdb, in, "workers"), sourcetest.Ack, settle.MaxAttempts(3), settle.DeadLetter(dlq))
		err = app.Validate()
		refusals := configErrors(t, err)
		if len(refusals) != 1 {
			t.Fatalf("refusals %v, want one", err)
		}
		msg := refusals[0].Error()
		if !strings.Contains(msg, in) || !strings.Contains(msg, dlq) || !strings.Contains(msg, "{") || !strings.Contains(msg, "hash tag") {
			t.Fatalf("refusal %q, want both keys named and a {hash tag} suggested", msg)
		}
	})

	t.Run("SharedHashTagIsAccepted", func(t *testing.T) {
		app, err := settle.New(settle.Config{})
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(settle.Stream(rdb, "{orders}:in", "workers"), sourcetest.Ack, settle.MaxAttempts(3), settle.DeadLetter("{orders}:dlq"))
		if err := app.Validate(); err != nil {
			t.Fatalf("Validate = %v, want nil", err)
		}
	})

	if n := dials.Load(); n != 0 {
		t.Fatalf("validation dialed %d times, want 0", n)
	}
}

// This test replaces slog's default logger, so it does not run in parallel.
func TestAppNilLoggerUsesSlogDefault(t *testing.T) {
	logs := logtest.New()
	old := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(old) })

	b := sourcetest.SetupStream(t)
	b.Publish(t, "unwanted", nil)
	app, err := settle.New(settle.Config{OnSettled: b.Rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	drop := settle.HandlerFunc(func(context.Context, *settle.Message) error { return settle.Drop(errors.New("unwanted")) })
	app.Mount(b.Stream(), drop, settle.Name("droppy"))
	stop := sourcetest.RunApp(t, app)
	sourcetest.WaitFinals(t, b.Rec, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dropped := logs.Containing("dropped")
	if len(dropped) != 1 || dropped[0].Level != slog.LevelWarn || dropped[0].Attrs["mount"] != "droppy" {
		t.Fatalf("default logger got %+v, want one warning about the drop on mount droppy", dropped)
	}
}

func TestAppOnSettledIsCalledForEverySettlement(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	for _, v := range []string{"ack", "drop", "retry", "dead"} {
		b.Publish(t, v, nil)
	}
	h := settle.Typed(func(_ context.Context, m *settle.Message, v string) error {
		switch {
		case v == "ack", v == "retry" && m.Attempt > 1:
			return nil
		case v == "drop":
			return settle.Drop(nil)
		}
		return settle.Retry(errors.New("fail"))
	})
	stop := sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.MaxAttempts(2), settle.DeadLetter(b.DLQ)))
	sourcetest.WaitFinals(t, b.Rec, 4)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range b.Rec.Events() {
		if e.Err != nil {
			t.Fatalf("settlement %+v failed", e)
		}
		got = append(got, e.Action.String())
	}
	slices.Sort(got)
	// sourcetest.Ack, drop; retry: copy then ack; dead: copy then dead letter.
	want := []string{"ack", "ack", "copy", "copy", "dead_letter", "drop"}
	if !slices.Equal(got, want) {
		t.Fatalf("settlements %v, want %v", got, want)
	}
}

func TestAppMiddlewareOrderIsOutermostFirst(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	b.Publish(t, "x", nil)
	var mu sync.Mutex
	var trace []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	mw := func(name string) settle.Middleware {
		return func(next settle.Handler) settle.Handler {
			return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
				note(name + ">")
				defer note("<" + name)
				return next.Handle(ctx, m)
			})
		}
	}
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		note("handler")
		return nil
	})
	sourcetest.RunApp(t, b.App(t, b.Stream(), h, settle.Use(mw("a"), mw("b")), settle.Use(mw("c"))))
	sourcetest.WaitFinals(t, b.Rec, 1)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a>", "b>", "c>", "handler", "<c", "<b", "<a"}; !slices.Equal(trace, want) {
		t.Fatalf("trace %v, want %v", trace, want)
	}
}

func TestAppShutdownLetsInFlightHandlersFinishAndSettles(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	id := b.Publish(t, "slow", nil)
	started, release := make(chan struct{}), make(chan struct{})
	var ctxDoneEarly atomic.Bool
	h := settle.HandlerFunc(func(ctx context.Context, _ *settle.Message) error {
		close(started)
		<-release
		ctxDoneEarly.Store(ctx.Err() != nil)
		return nil
	})
	app := b.App(t, b.Stream(), h)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	<-started
	cancel()
	close(release) // the handler finishes after the shutdown began
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("Run did not return")
	}
	evs := b.Rec.Events()
	if len(evs) != 1 || evs[0].ID != id || evs[0].Action != settle.ActionAck || evs[0].Err != nil {
		t.Fatalf("events %+v, want the in-flight delivery acked", evs)
	}
	if ctxDoneEarly.Load() {
		t.Fatal("the handler's context was cancelled with Run's: a drain is not a kill")
	}
	if n := b.Pending(t); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}

func TestAppDrainTimeoutCancelsHandlersWithShutdownCause(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	b.Publish(t, "stuck", nil)
	started := make(chan struct{})
	h := settle.HandlerFunc(func(ctx context.Context, _ *settle.Message) error {
		close(started)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), settle.ErrDrainTimeout) {
			return settle.Drop(errors.New("context cancelled without the shutdown cause"))
		}
		return context.Cause(ctx)
	})
	cfg := b.Config()
	cfg.DrainTimeout = 20 * time.Millisecond
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(b.Stream(), h)
	stop := sourcetest.RunApp(t, app)
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	evs := b.Rec.Events()
	// The handler returned the shutdown cause: a plain error, so a retry after its backoff,
	// parked in the process and written back at once as Run stops.
	if len(evs) != 2 || evs[0].Action != settle.ActionPark || evs[1].Action != settle.ActionCopy || evs[1].Err != nil || !errors.Is(evs[1].HandlerErr, settle.ErrDrainTimeout) {
		t.Fatalf("events %+v, want the cancelled handler's delivery retried with the shutdown cause", evs)
	}
	if n := b.Pending(t); n != 0 {
		t.Fatalf("%d pending, want 0: the retry copy was written before Run returned", n)
	}
}
