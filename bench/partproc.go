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
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/settlekit/settle"
)

// A partitions row's consumers are processes of their own: the bench runs itself again
// with -partchild (stream or partitioned), -partaddrs (the cluster's masters), -partkey
// (the stream, or the partitioned stream's name), -partmember (its consumer name) and
// -partitions. A child mounts the key at the default options with a handler that only
// counts, says "ready" on stdout once its App runs, then answers each "stat" line on
// stdin with one line of its figures, until "stop" (or the end of stdin).

// partChildFlags are a child's flags, parsed in main.
type partChildFlags struct {
	kind, addrs, key, member string
	partitions               int
}

// ownership counts the commands of a partitioned mount's ownership its client sends:
// lease calls (take, renew, hand back: the lease script on a lease key), membership
// heartbeats (the member script on the members key) and fences (HMGET of a lease key
// before a settlement batch).
type ownership struct {
	lease, beat, fence atomic.Int64
}

func (o *ownership) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *ownership) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		o.count(cmd)
		return next(ctx, cmd)
	}
}

func (o *ownership) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			o.count(c)
		}
		return next(ctx, cmds)
	}
}

func (o *ownership) count(cmd redis.Cmder) {
	args := cmd.Args()
	key := func(i int) string {
		if i < len(args) {
			s, _ := args[i].(string)
			return s
		}
		return ""
	}
	switch cmd.Name() {
	case "evalsha", "eval": // EVALSHA sha numkeys key...
		switch k := key(3); {
		case strings.Contains(k, ":lease:"):
			o.lease.Add(1)
		case strings.Contains(k, ":members:"):
			o.beat.Add(1)
		}
	case "hmget":
		if strings.Contains(key(1), ":lease:") {
			o.fence.Add(1)
		}
	}
}

// childStat is one child's answer to "stat".
type childStat struct {
	handled            int64
	first, last        int64         // Unix ns of the first and last handler call (0: none yet)
	cpu, cpuFirst      time.Duration // the process's CPU now, and at its first handler call
	lease, beat, fence int64
}

func (s childStat) line() string {
	return fmt.Sprintf("stat %d %d %d %d %d %d %d %d", s.handled, s.first, s.last, s.cpu, s.cpuFirst, s.lease, s.beat, s.fence)
}

func parseChildStat(line string) (childStat, error) {
	f := strings.Fields(line)
	if len(f) != 9 || f[0] != "stat" {
		return childStat{}, fmt.Errorf("child said %q, not a stat line", line)
	}
	v := make([]int64, 8)
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return childStat{}, fmt.Errorf("child said %q: %w", line, err)
		}
		v[i] = n
	}
	return childStat{handled: v[0], first: v[1], last: v[2], cpu: time.Duration(v[3]), cpuFirst: time.Duration(v[4]),
		lease: v[5], beat: v[6], fence: v[7]}, nil
}

// partChild runs one consumer process of a partitions row.
func partChild(ctx context.Context, cf partChildFlags) error {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cf.addrs, ",")})
	defer rdb.Close()
	own := &ownership{}
	rdb.AddHook(own)
	var handled, first, last, cpuFirst atomic.Int64
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		now := time.Now().UnixNano()
		if handled.Add(1) == 1 {
			first.Store(now)
			cpuFirst.Store(int64(rusageCPU()))
		}
		for {
			l := last.Load()
			if now <= l || last.CompareAndSwap(l, now) {
				break
			}
		}
		return nil
	})
	var src settle.Source
	switch cf.kind {
	case "stream":
		src = settle.Stream(rdb, cf.key, "g", settle.Consumer(cf.member))
	case "partitioned":
		src = settle.PartitionedStream(rdb, cf.key, "g", settle.Partitions(cf.partitions), settle.Consumer(cf.member))
	default:
		return fmt.Errorf("-partchild %q: no such kind (stream, partitioned)", cf.kind)
	}
	app, err := settle.New(settle.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	app.Mount(src, h)
	if err := app.Validate(); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(rctx) }()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() != "stop" {
		if in.Text() == "stat" {
			fmt.Println(childStat{handled: handled.Load(), first: first.Load(), last: last.Load(), cpu: rusageCPU(),
				cpuFirst: time.Duration(cpuFirst.Load()), lease: own.lease.Load(), beat: own.beat.Load(), fence: own.fence.Load()}.line())
		}
	}
	cancel()
	return <-errc
}

// partProc is a running child, as its parent drives it.
type partProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan error
}

// startPartProc starts a child of kind on key, named member.
func startPartProc(c *cluster, kind, key, member string, partitions int) (*partProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-partchild", kind, "-partaddrs", strings.Join(c.addrs(), ","), "-partkey", key,
		"-partmember", member, "-partitions", strconv.Itoa(partitions))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a child dies with the bench
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	p := &partProc{cmd: cmd, in: in, lines: make(chan string, 4), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	return p, nil
}

// next returns the child's next line.
func (p *partProc) next(timeout time.Duration) (string, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("child %d ended: %v", p.cmd.Process.Pid, <-p.done)
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("child %d said nothing in %s", p.cmd.Process.Pid, timeout)
	}
}

// ready waits for the child's "ready".
func (p *partProc) ready() error {
	l, err := p.next(30 * time.Second)
	if err == nil && l != "ready" {
		err = fmt.Errorf("child %d said %q, not ready", p.cmd.Process.Pid, l)
	}
	return err
}

func (p *partProc) stat() (childStat, error) {
	if _, err := fmt.Fprintln(p.in, "stat"); err != nil {
		return childStat{}, err
	}
	l, err := p.next(10 * time.Second)
	if err != nil {
		return childStat{}, err
	}
	return parseChildStat(l)
}

// stop stops the child (a graceful stop: a partitioned mount hands its leases back) and
// waits for it, killing it (by its pid) after 30 s.
func (p *partProc) stop() error {
	_, _ = fmt.Fprintln(p.in, "stop")
	_ = p.in.Close()
	t := time.AfterFunc(30*time.Second, func() { _ = p.cmd.Process.Kill() })
	defer t.Stop()
	for range p.lines {
	}
	return <-p.done
}
