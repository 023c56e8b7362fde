package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
)

// A flow-limit row's consumers are processes of their own: the bench runs itself again
// with -limitchild (the row), -redis (the server), -limitkey (the stream) and -limitend
// (when to stop, in Unix ns). A child mounts the stream with the row's limit, says
// "ready" on stdout once its App runs, and writes one line per handler start until the
// end, then exits; the parent reads every child's lines. All run on one machine, so
// their wall clocks agree.

// childFlags are a child's flags, parsed in main.
type childFlags struct {
	row, key string
	end      int64
}

// limitChild runs one consumer process of a flow-limit row and writes its lines to
// stdout:
//
//	rate:  "<start ns>" per start;
//	hot:   "<lateness ns>" per cold key's start (start − its "at" header);
//	slots: "<key> <start ns> <end ns>" per delivery (the handler's 1 ms of work between).
func limitChild(ctx context.Context, redisURL string, cf childFlags) error {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		mu.Unlock()
	}
	byKey := func(m *settle.Message) string { return m.Headers["k"] }
	var h settle.Handler
	var opt settle.MountOption
	switch cf.row {
	case "rate":
		opt = settle.RateLimit(1000, time.Second)
		h = settle.HandlerFunc(func(context.Context, *settle.Message) error {
			line("%d", time.Now().UnixNano())
			return nil
		})
	case "hot":
		opt = settle.RateLimitBy(byKey, 10, time.Second)
		h = settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if m.Headers["k"] != "hot" {
				at, _ := strconv.ParseInt(m.Headers["at"], 10, 64)
				line("%d", time.Now().UnixNano()-at)
			}
			return nil
		})
	case "slots":
		opt = settle.ConcurrencyBy(byKey, 1)
		h = settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			start := time.Now().UnixNano()
			time.Sleep(time.Millisecond) // the handler's work
			line("%s %d %d", m.Headers["k"], start, time.Now().UnixNano())
			return nil
		})
	default:
		return fmt.Errorf("-limitchild %q: no such row", cf.row)
	}
	app, err := settle.New(settle.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	app.Mount(settle.Stream(rdb, cf.key, "g"), h, opt)
	if err := app.Validate(); err != nil {
		return err
	}
	rctx, cancel := context.WithDeadline(ctx, time.Unix(0, cf.end))
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(rctx) }()
	line("ready")
	mu.Lock()
	_ = out.Flush()
	mu.Unlock()
	err = <-errc
	mu.Lock()
	defer mu.Unlock()
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	return err
}

// children runs n child processes of row on key until end; ready is closed once every
// one said it runs, and wait returns their lines (the "ready" lines left out).
func children(ctx context.Context, srv *server, row, key string, n int, end time.Time) (ready <-chan struct{}, wait func() ([]string, error), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	url := "redis://" + srv.opts.Addr + "/" + strconv.Itoa(srv.opts.DB)
	var (
		mu    sync.Mutex
		lines []string
		errs  []error
		wg    sync.WaitGroup
		said  sync.WaitGroup
	)
	allReady := make(chan struct{})
	for range n {
		cmd := exec.CommandContext(ctx, exe, "-limitchild", row, "-redis", url, "-limitkey", key, "-limitend", strconv.FormatInt(end.UnixNano(), 10))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a child dies with the bench
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("start child: %w", err)
		}
		said.Add(1)
		wg.Go(func() {
			sc := bufio.NewScanner(stdout)
			var mine []string
			seen := false
			for sc.Scan() {
				if !seen && sc.Text() == "ready" {
					seen = true
					said.Done()
					continue
				}
				mine = append(mine, sc.Text())
			}
			if !seen {
				said.Done()
			}
			err := cmd.Wait()
			mu.Lock()
			lines = append(lines, mine...)
			if err != nil {
				errs = append(errs, fmt.Errorf("child %d: %w", cmd.Process.Pid, err))
			}
			mu.Unlock()
		})
	}
	go func() { said.Wait(); close(allReady) }()
	return allReady, func() ([]string, error) {
		wg.Wait()
		if len(errs) > 0 {
			return lines, errs[0]
		}
		return lines, nil
	}, nil
}
