package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
)

// idleKinds are the transports whose idle cost -idle measures, each a mount of one
// empty key (or channel) at the default options.
var idleKinds = []struct {
	name  string
	mount func(rdb *redis.Client, key string) settle.Source
}{
	{"stream", func(rdb *redis.Client, key string) settle.Source { return settle.Stream(rdb, key, "g") }},
	{"claiming-stream", func(rdb *redis.Client, key string) settle.Source {
		return settle.ClaimingStream(rdb, key, "g", 30*time.Second)
	}},
	{"list", func(rdb *redis.Client, key string) settle.Source { return settle.List(rdb, key) }},
	{"reliable-list", func(rdb *redis.Client, key string) settle.Source { return settle.ReliableList(rdb, key) }},
	{"pubsub", func(rdb *redis.Client, key string) settle.Source { return settle.PubSub(rdb, key) }},
	{"pubsub-pattern", func(rdb *redis.Client, key string) settle.Source {
		return settle.PubSubPattern(rdb, key+":*", settle.OutRetry(key+":retry"))
	}},
}

// runIdle measures what idle mounts cost: for each transport, an App of mounts (each
// counted in counts) on empty keys at the default options, warmed up, then watched for
// window: this process's CPU, the server's CPU and the commands it ran.
func runIdle(ctx context.Context, cfg config, window time.Duration, counts []int) error {
	srv, admin, done, err := redisServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	fmt.Printf("idle mounts at the default options, each watched for %s after a 3s warm-up; server %s\n\n", window, srv.opts.Addr)
	fmt.Printf("%-16s %6s %12s %12s %14s  %s\n", "transport", "mounts", "client CPU", "server CPU", "cmds/s/mount", "commands per second (all mounts)")
	for _, k := range idleKinds {
		if !selected(cfg.only, k.name) {
			continue
		}
		for _, n := range counts {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s, err := idleRun(ctx, cfg, srv, admin, k.mount, n, window)
			if err != nil {
				return fmt.Errorf("%s × %d: %w", k.name, n, err)
			}
			secs := s.elapsed.Seconds()
			srvCPU := "?"
			if s.srvOK {
				srvCPU = fmt.Sprintf("%.2f%%", 100*s.srvCPU.Seconds()/secs)
			}
			fmt.Printf("%-16s %6d %11.2f%% %12s %14.2f  %s\n", k.name, n, 100*s.cliCPU.Seconds()/secs, srvCPU,
				float64(s.totalCmds())/secs/float64(n), topCommands(s.cmds, int(secs)))
		}
	}
	return nil
}

// redisServer is -redis or, with -spawn, a server of the benchmark's own, with a client
// for INFO; done closes the client and stops a spawned server.
func redisServer(ctx context.Context, cfg config) (srv *server, admin *redis.Client, done func(), err error) {
	if cfg.spawn {
		srv, err = spawn(ctx)
	} else {
		srv, err = connect(ctx, cfg.redisURL)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	admin = srv.client(2)
	return srv, admin, func() { _ = admin.Close(); srv.stop() }, nil
}

func idleRun(ctx context.Context, cfg config, srv *server, admin *redis.Client, mount func(*redis.Client, string) settle.Source, n int, window time.Duration) (*sample, error) {
	tok := token()
	rdb := srv.client(cfg.pool)
	defer rdb.Close()
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	app, err := settle.New(settle.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	for i := range n {
		app.Mount(mount(rdb, fmt.Sprintf("idle:%s:%d", tok, i)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
			settle.Name(fmt.Sprintf("idle-%d", i)), settle.MaxAttempts(3))
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()
	select {
	case err := <-errc:
		cancel()
		return nil, fmt.Errorf("run: %w", err)
	case <-time.After(3 * time.Second): // the warm-up: mounts open and reach their first wait
	}
	m := &meter{admin: admin, serverCPU: func() (time.Duration, error) { return serverCPU(srv.pid) }}
	if err := m.start(ctx); err != nil {
		cancel()
		return nil, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
	}
	s, err := m.stop(context.WithoutCancel(ctx), 0)
	cancel()
	if rerr := <-errc; rerr != nil && err == nil {
		fmt.Fprintln(os.Stderr, "bench: idle run:", rerr)
	}
	return s, err
}
