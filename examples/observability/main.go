// Command observability runs a refund service with settle's OpenTelemetry module
// (settleotel): metrics through the OpenTelemetry Prometheus exporter on /metrics,
// traces through the stdout trace exporter, and no other code for either.
//
// Refunds go through a processor that answers by refund id: most go through at once; a
// refund whose id is a multiple of 5 finds the processor busy on its first attempt and
// waits a backoff in a durable delay set (settle.RetryAfter); one whose id is a multiple
// of 8 finds it busy, then unavailable on every later attempt, and is dead-lettered at
// the fifth (settle.MaxAttempts(5)) to {refunds}.dlq.
//
// Once every refund is settled it prints, for the first refund that was retried and
// dead-lettered, its spans as a tree: the publish, each attempt (a CONSUMER span of its
// own trace, linked to the publish and to the attempt before), and the dead letter, with
// every link. Then it scrapes its own /metrics over HTTP and prints the
// settle_settlements_total series of the dead letters and settle_dead_letters, beside
// the dead-letter stream's length: they agree. With -serve it goes on serving /metrics
// until interrupted (point Prometheus, and the dashboard in settleotel/dashboard.json,
// at it).
//
//	go run ./examples/observability [-n 40] [-serve] [-addr 127.0.0.1:9464] [-spans]
//
// By default it runs on an embedded miniredis; -redis names a real server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/settleotel"
)

// Keys, all under the {refunds} hash tag.
const (
	keyIn      = "{refunds}:obs"
	keyDLQ     = "{refunds}:obs.dlq"
	keyDelayed = "{refunds}:obs.delayed"
	group      = "refunds"
	mountName  = "refunds"
	attempts   = 5
	headerID   = "refund-id"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

// flags are the command's options.
type flags struct {
	addr    string
	n       int
	prefix  string
	redis   string
	serve   bool
	spans   bool
	verbose bool
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("observability", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:0", "where /metrics listens")
	fs.IntVar(&f.n, "n", 40, "how many refunds to publish")
	fs.StringVar(&f.prefix, "prefix", "", "prefix for every key (tests)")
	fs.StringVar(&f.redis, "redis", "", "Redis URL (default: an embedded miniredis)")
	fs.BoolVar(&f.serve, "serve", false, "keep serving /metrics until interrupted")
	fs.BoolVar(&f.spans, "spans", false, "write every span, as the stdout exporter renders it, to stderr")
	fs.BoolVar(&f.verbose, "v", false, "log settle's settlements (Debug)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.n < 8 {
		return f, fmt.Errorf("-n %d: publish at least 8, so that one refund is dead-lettered", f.n)
	}
	return f, nil
}

// logger logs settle's warnings to w, and with -v every settlement (Debug).
func (f flags) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if f.verbose {
		opts.Level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// answer is the processor's answer to refund id at attempt: nil (refunded), or why not.
func answer(id, attempt int, backoff time.Duration) error {
	switch {
	case id%8 == 0 && attempt == 1, id%5 == 0 && attempt == 1:
		return settle.RetryAfter(backoff, errors.New("processor busy: rate limit reached"))
	case id%8 == 0:
		return settle.Retry(errors.New("processor unavailable: no answer"))
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parse(args, stderr)
	if err != nil {
		return err
	}
	logger := f.logger(stderr)
	rdb, closeRedis, err := redisClient(ctx, f.redis)
	if err != nil {
		return err
	}
	defer closeRedis()

	// Metrics: the OpenTelemetry SDK read by the Prometheus exporter.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.WithoutCancel(ctx))
	// Traces: the stdout exporter (to stderr with -spans), and the spans kept to print
	// one refund's tree.
	spanOut := io.Discard
	if f.spans {
		spanOut = stderr
	}
	stdoutExp, err := stdouttrace.New(stdouttrace.WithWriter(spanOut))
	if err != nil {
		return err
	}
	kept := &keptSpans{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(stdoutExp), sdktrace.WithSpanProcessor(kept))
	defer tp.Shutdown(context.WithoutCancel(ctx))

	obs, err := settleotel.New(settleotel.WithMeterProvider(mp), settleotel.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	in, dlq, delaySet := f.prefix+keyIn, f.prefix+keyDLQ, f.prefix+keyDelayed
	gauges, err := obs.RegisterGauges(settleotel.Gauges{
		Inspector: admin.NewInspector(rdb),
		Streams:   []settleotel.StreamGauge{{Mount: mountName, Key: in, Group: group, DelaySet: delaySet, DeadLetter: dlq}},
	})
	if err != nil {
		return err
	}
	defer gauges.Unregister()

	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(stdout, "serving %s\n", metricsURL)

	count := newCounter(f.n)
	app, err := settle.New(settle.Config{Logger: logger, Hooks: obs.Hooks(), OnSettled: count.settled})
	if err != nil {
		return err
	}
	const backoff = 50 * time.Millisecond
	app.Mount(settle.Stream(rdb, in, group, settle.Block(200*time.Millisecond)),
		settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			id, _ := strconv.Atoi(m.Headers[headerID])
			settle.AddLogAttrs(ctx, slog.Int("refund_id", id)) // on settle's lines for this delivery
			return answer(id, m.Attempt, backoff)
		}),
		settle.Name(mountName), settle.MaxAttempts(attempts), settle.DeadLetter(dlq),
		settle.DelayIn(delayed.DurableZset{Key: delaySet, TTL: time.Hour}))
	if err := app.Validate(); err != nil {
		return err
	}
	pub := settle.NewPublisher(rdb, settle.WithPublishHook(obs.PublishHook()))
	for id := 1; id <= f.n; id++ {
		if _, err := pub.Publish(ctx, in, map[string]int{"id": id, "cents": 100 * id}, settle.Header(headerID, strconv.Itoa(id))); err != nil {
			return err
		}
	}
	if err := runUntilSettled(ctx, app, count); err != nil {
		return err
	}
	fmt.Fprintln(stdout, count.summary())
	if err := tp.ForceFlush(ctx); err != nil {
		return err
	}
	if err := printChain(stdout, kept.all(), count.firstDead()); err != nil {
		return err
	}
	dlqLen, err := rdb.XLen(ctx, dlq).Result()
	if err != nil {
		return err
	}
	if err := printScrape(ctx, stdout, metricsURL, count.deadLettered(), dlqLen); err != nil {
		return err
	}
	if f.serve {
		fmt.Fprintf(stdout, "serving %s until interrupted\n", metricsURL)
		<-ctx.Done()
	}
	return nil
}

// runUntilSettled runs app until every refund reached a final settlement, then stops it
// gracefully.
func runUntilSettled(ctx context.Context, app *settle.App, c *counter) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()
	select {
	case <-c.done:
		cancel()
		return <-errc
	case err := <-errc:
		return fmt.Errorf("the app stopped before every refund settled (%s): %v", c.summary(), err)
	case <-time.After(time.Minute):
		cancel()
		<-errc
		return fmt.Errorf("timed out: %s", c.summary())
	}
}

// redisClient connects to url, or to an embedded miniredis when url is "", and returns
// the function that closes what it opened.
func redisClient(ctx context.Context, url string) (*redis.Client, func(), error) {
	if url == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, nil, err
		}
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		return rdb, func() { _ = rdb.Close(); mr.Close() }, nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(opt)
	return rdb, func() { _ = rdb.Close() }, rdb.Ping(ctx).Err()
}
