package soak

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// The failover test's size: failoverN messages, of which failoverBefore are handled
// while the replica follows and failoverFrozen more while it is frozen (SIGSTOP, its
// link cut), before the primary dies and the replica takes over.
const (
	failoverN        = 300
	failoverBefore   = 100
	failoverFrozen   = 100
	failoverDeadline = 60 * time.Second
	// failoverAttempts bounds how many times the Async case sets up its window again
	// when the freeze missed it (see the test).
	failoverAttempts = 3
)

// TestFailoverUndoesNoSettlementReportedAppliedWithWaitReplicas: a primary and a replica
// of the test's own; a Stream mount acks what it reads. Once failoverBefore messages are
// handled the replica is frozen (SIGSTOP, and the primary cuts its link: it receives no
// more of the replication stream),
// failoverFrozen more are handled on the primary, which is then killed (SIGKILL); the
// replica is thawed and promoted, and the consumer's client follows it. Redis
// replication is asynchronous, so what the primary wrote while the replica was frozen is
// gone: every message is still handled (nothing is lost: an ack that is undone makes its
// message pending or unread again on the new primary, and it is delivered again), but
// without WaitReplicas acks that OnSettled reported applied are undone (the message is
// handled again), while with WaitReplicas(1, 100ms) none is: an ack the replica did not
// acknowledge in time is reported failed. The figures go to the log for RELIABILITY.md.
func TestFailoverUndoesNoSettlementReportedAppliedWithWaitReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool
	}{
		{"Async", false},
		{"WaitReplicas", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := failover(t, tc.wait)
			for attempt := 2; !tc.wait && r.undone == 0 && r.runs == failoverN && attempt <= failoverAttempts; attempt++ {
				// Every ack reached the replica: the freeze missed the acks it was to cut
				// off (seen once under -race on a loaded machine). The window is the
				// harness's, not settle's: set it up again on new servers.
				t.Logf("attempt %d: %d handler runs, none again after the failover (replica links cut: %d): the frozen replica did not make the window; trying again", attempt-1, r.runs, r.cut)
				r = failover(t, tc.wait)
			}
			t.Logf("%d messages: %d handler runs (%d again after the failover), %d acks reported applied and then undone, %d reported failed; lost %d",
				failoverN, r.runs, r.runs-failoverN, r.undone, r.failed, r.lost)
			if r.lost != 0 {
				t.Errorf("%d messages were never handled: a failover must lose no message that was on the replica", r.lost)
			}
			if tc.wait && r.failed < failoverFrozen {
				t.Errorf("with WaitReplicas, %d acks reported failed, want at least the %d made while the replica was cut off", r.failed, failoverFrozen)
			}
			if tc.wait && r.undone != 0 {
				t.Errorf("with WaitReplicas, %d acks reported applied were undone by the failover, want 0", r.undone)
			}
			if !tc.wait && r.undone == 0 {
				t.Errorf("without WaitReplicas no ack reported applied was undone: the frozen replica did not make the window this test measures")
			}
		})
	}
}

type failoverResult struct {
	runs, undone, failed, lost int
	cut                        int64 // replica links the freeze cut (CLIENT KILL's count)
}

func failover(t *testing.T, wait bool) failoverResult {
	primary := startOwnRedisWith(t, "--appendonly", "no")
	replica := startOwnRedisWith(t, "--appendonly", "no", "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	ctx, cancel := context.WithTimeout(context.Background(), failoverDeadline)
	defer cancel()
	waitLink(t, ctx, replica)

	// The consumer's client dials whichever server is the primary now.
	var target atomic.Value
	target.Store(primary.addr())
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		},
		MaxRetries: -1,
	})
	defer rdb.Close()
	const key, group = "{failover}:in", "g"
	pub := settle.NewPublisher(rdb)
	for i := range failoverN {
		if _, err := pub.Publish(ctx, key, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XGroupCreateMkStream(ctx, key, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if n := replicated(ctx, rdb); n != 1 {
		t.Fatalf("WAIT: %d replicas have the published messages, want 1", n)
	}

	var (
		mu      sync.Mutex
		runs    = make(map[string]int)  // handler runs by entry id
		applied = make(map[string]bool) // an ack was reported applied
		undone  = make(map[string]bool) // handled again after an ack reported applied
		failed  int
		settled atomic.Int64 // acks reported, applied or failed
		runsAll atomic.Int64
		frozen  = make(chan struct{}) // closed: the runs of the frozen phase may start
		moved   = make(chan struct{}) // closed: the runs after the failover may start
		all     = make(chan struct{})
	)
	h := settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		// The test lets the handlers through in phases, so that each phase's acks are
		// settled before the next one starts.
		n := runsAll.Add(1)
		for _, g := range []struct {
			after int64
			gate  chan struct{}
		}{{failoverBefore, frozen}, {failoverBefore + failoverFrozen, moved}} {
			if n > g.after {
				select {
				case <-g.gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		mu.Lock()
		runs[m.ID]++
		if applied[m.ID] {
			undone[m.ID] = true
		}
		if len(runs) == failoverN && runs[m.ID] == 1 {
			close(all)
		}
		mu.Unlock()
		return nil
	})
	app, err := settle.New(settle.Config{OnSettled: func(_ context.Context, s settle.Settled) {
		if s.Action != settle.ActionAck {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		settled.Add(1)
		if s.Err != nil {
			failed++
			return
		}
		applied[s.ID] = true
	}})
	if err != nil {
		t.Fatal(err)
	}
	opts := []settle.MountOption{settle.Concurrency(4)}
	if wait {
		opts = append(opts, settle.WaitReplicas(1, 100*time.Millisecond))
	}
	app.Mount(settle.Stream(rdb, key, group, settle.Consumer("c1")), h, opts...)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()

	waitCount(t, ctx, &settled, failoverBefore)
	// Freeze the replica and cut its link: what the primary writes from now on never
	// reaches it (with the link open, the replica's socket buffer would hold it).
	if err := syscall.Kill(replica.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cut, err := rdb.ClientKillByFilter(ctx, "TYPE", "replica").Result()
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	close(frozen)
	waitCount(t, ctx, &settled, failoverBefore+failoverFrozen)
	primary.kill()
	if err := syscall.Kill(replica.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	promote := redis.NewClient(&redis.Options{Addr: replica.addr()})
	defer promote.Close()
	if err := promote.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	target.Store(replica.addr())
	close(moved)

	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		t.Fatalf("after the failover only %d of %d messages were handled", n, failoverN)
	}
	// Everything handled at least once; wait until the new primary shows nothing pending,
	// so the counts below are final.
	for {
		p, err := promote.XPending(ctx, key, group).Result()
		if err == nil && p.Count == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("XPENDING on the new primary did not reach 0: %+v, %v", p, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	r := failoverResult{undone: len(undone), failed: failed, lost: failoverN - len(runs), cut: cut}
	for _, c := range runs {
		r.runs += c
	}
	return r
}

// waitCount waits until c reaches n.
func waitCount(t *testing.T, ctx context.Context, c *atomic.Int64, n int64) {
	t.Helper()
	for c.Load() < n {
		select {
		case <-ctx.Done():
			t.Fatalf("%d acks settled, want %d", c.Load(), n)
		case <-time.After(time.Millisecond):
		}
	}
}

// waitLink waits until the replica's link to its primary is up and in sync.
func waitLink(t *testing.T, ctx context.Context, replica *ownRedis) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: replica.addr()})
	defer c.Close()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica's link did not come up: %v\n%s", err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replicated returns how many replicas have every write made so far on rdb's server.
func replicated(ctx context.Context, rdb *redis.Client) int64 {
	var w *redis.Cmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{failover}:marker", "1", time.Minute)
		w = p.Do(ctx, "wait", 1, 5000)
		return nil
	})
	n, _ := w.Int64()
	return n
}
