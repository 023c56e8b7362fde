package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/ledger"
)

// proc is one worker process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process was reaped
	err  error         // cmd.Wait's result, set before done closes
	log  string        // its stderr and stdout
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// harness runs worker processes in slots, kills them and restarts them. Every process it
// starts is killed by pid when the test ends, if still running.
type harness struct {
	base   workerConfig
	dir    string
	ledger string
	rng    *rand.Rand
	t      *testing.T
	w      *ledger.Writer

	consumers   []string // every consumer name used, for drain checks
	gen         int
	repliesLost bool // the server is restarted mid-run (see ledger.Input.RepliesLost)
	poisonExits int  // workers that exited on the poison message (and were restarted)
	slots       []*proc
}

func newHarness(t *testing.T, base workerConfig, seed int64) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{base: base, dir: dir, ledger: filepath.Join(dir, "ledger"), rng: rand.New(rand.NewPCG(uint64(seed), 0x50a4)), t: t}
	h.base.Ledger = h.ledger
	h.base.Seed = seed
	w, err := ledger.Open(h.ledger)
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	t.Cleanup(func() {
		for _, p := range h.slots {
			if p != nil && !p.exited() {
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		_ = w.Close()
	})
	return h
}

// start starts a worker in slot, with a consumer name of its own.
func (h *harness) start(slot int) {
	h.t.Helper()
	h.gen++
	cfg := h.base
	cfg.Consumer = fmt.Sprintf("w%d-%d", slot, h.gen)
	h.consumers = append(h.consumers, cfg.Consumer)
	raw, err := json.Marshal(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	p := &proc{done: make(chan struct{}), log: filepath.Join(h.dir, cfg.Consumer+".log")}
	out, err := os.Create(p.log)
	if err != nil {
		h.t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestSoakWorker$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		_ = out.Close()
		h.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	for len(h.slots) <= slot {
		h.slots = append(h.slots, nil)
	}
	h.slots[slot] = p
}

// kill kills slot's worker with SIGKILL, reaps it and records the kill.
func (h *harness) kill(slot int) {
	h.t.Helper()
	p := h.slots[slot]
	_ = p.cmd.Process.Kill()
	<-p.done
	if err := h.w.Kill(p.cmd.Process.Pid); err != nil {
		h.t.Fatal(err)
	}
}

// tail returns the end of a worker's log.
// logs returns each worker's whole log, in slot order ("" for a slot never started).
func (h *harness) logs() []string {
	out := make([]string, len(h.slots))
	for i, p := range h.slots {
		if p != nil {
			b, _ := os.ReadFile(p.log)
			out[i] = string(b)
		}
	}
	return out
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// plan says how a supervision kills.
type plan struct {
	deadline    time.Duration // the drain must complete within it
	maxKills    int
	minInterval time.Duration // between kills
	maxInterval time.Duration
	// killWhen, when set, says when the next kill is due, and of which slot's worker,
	// instead of the intervals and a random slot.
	killWhen func() (slot int, due bool)
}

// supervise keeps every slot running (restarting a worker that exited on the poison
// message), kills a random worker at random intervals until maxKills, and returns once
// drained reports true; it fails the test at the deadline or when a worker exits on its
// own otherwise.
func (h *harness) supervise(pl plan, drained func(ctx context.Context) (bool, error)) {
	h.t.Helper()
	ctx := context.Background()
	start := time.Now()
	interval := func() time.Duration {
		return pl.minInterval + time.Duration(h.rng.Int64N(int64(pl.maxInterval-pl.minInterval)+1))
	}
	nextKill := start.Add(interval())
	kills := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		for i, p := range h.slots {
			if !p.exited() {
				continue
			}
			var ee *exec.ExitError
			if h.base.Poison && errors.As(p.err, &ee) && ee.ExitCode() == exitPoison {
				// Died without a drain, like a kill: its deliveries in flight never settle.
				if err := h.w.Kill(p.cmd.Process.Pid); err != nil {
					h.t.Fatal(err)
				}
				h.poisonExits++
				h.start(i)
				continue
			}
			h.t.Fatalf("worker %d (pid %d) exited on its own: %v\n%s", i, p.cmd.Process.Pid, p.err, p.tail())
		}
		ok, err := drained(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		if ok {
			return
		}
		now := time.Now()
		if now.Sub(start) > pl.deadline {
			rep := h.check(nil, 0)
			h.t.Fatalf("not drained within %s (%d kills); the ledger so far: %s\nfirst problems:\n%s", pl.deadline, kills, rep, firstProblems(rep, 20))
		}
		slot, due := -1, now.After(nextKill)
		if pl.killWhen != nil && kills < pl.maxKills {
			slot, due = pl.killWhen()
		}
		if kills < pl.maxKills && due {
			if slot < 0 {
				slot = h.rng.IntN(len(h.slots))
			}
			h.kill(slot)
			h.start(slot)
			kills++
			nextKill = now.Add(interval())
		}
	}
}

// stopAll stops every worker with SIGTERM (a graceful drain) and waits for them; a
// worker that does not exit within 30s fails the test.
func (h *harness) stopAll() {
	h.t.Helper()
	for _, p := range h.slots {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	timeout := time.After(30 * time.Second)
	for i, p := range h.slots {
		select {
		case <-p.done:
		case <-timeout:
			h.t.Fatalf("worker %d (pid %d) did not stop within 30s of SIGTERM\n%s", i, p.cmd.Process.Pid, p.tail())
		}
		if p.err != nil {
			// Terminated before it could catch SIGTERM (still starting): it ran nothing
			// after its start line, but record it as killed all the same.
			if err := h.w.Kill(p.cmd.Process.Pid); err != nil {
				h.t.Fatal(err)
			}
			h.t.Logf("worker %d (pid %d) did not stop gracefully: %v\n%s", i, p.cmd.Process.Pid, p.err, p.tail())
		}
	}
}

// check reads the ledger and judges it against the dead letters.
func (h *harness) check(dead []ledger.Dead, cap int) ledger.Report {
	h.t.Helper()
	evs, err := ledger.Read(h.ledger)
	if err != nil {
		h.t.Fatal(err)
	}
	return ledger.Check(ledger.Input{Events: evs, Dead: dead, MaxAttempts: cap, RepliesLost: h.repliesLost})
}

func firstProblems(rep ledger.Report, n int) string {
	ps := rep.Problems
	if len(ps) > n {
		ps = append(ps[:n:n], fmt.Sprintf("… and %d more", len(rep.Problems)-n))
	}
	return strings.Join(ps, "\n")
}
