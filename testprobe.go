package settle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/timerq"
)

// TestBlock bounds every read's block under a TestProbe and a test clock (see
// TestConfig.Probe): a read that finds nothing returns within about this long, so that
// TestProbe.WaitIdle takes a few of them, not a few of the source's Block.
const TestBlock = 25 * time.Millisecond

// probeTick is how often WaitIdle looks again (real time: it waits on several counters
// that signal nothing).
const probeTick = time.Millisecond

// TestProbe lets a test wait until an App is idle: give a new one to TestConfig.Probe
// (settletest's Harness does) and call WaitIdle while the App runs. Its zero value is
// ready to use. It is for tests only.
type TestProbe struct {
	mu      sync.Mutex
	mounts  []*mount
	delays  *timerq.Queue
	stopped bool
}

// probeState is what a mount's run has made that a TestProbe reads.
type probeState struct {
	acks  *acker
	slots chan struct{}
}

// attach gives the probe the running App's mounts and in-process delays (nil: the App
// stopped).
func (p *TestProbe) attach(ms []*mount, delays *timerq.Queue) {
	p.mu.Lock()
	p.mounts, p.delays = ms, delays
	p.stopped = ms == nil
	p.mu.Unlock()
}

// WaitIdle waits until the App is idle at its clock's now and returns nil; it returns
// an error naming what is still busy if ctx ends first (the App not started yet, say),
// and at once if the App's Run has returned. Idle means:
//   - no mount holds a delivery (running, waiting for a worker, or its settlement being
//     written) or an ack not yet written, and no in-process delay due at now waits to be
//     written back (one not due yet is idle: the clock must move first);
//   - then every mount has begun a read after that and the read came back empty (a
//     paused mount waiting for its next pause check counts), so that what came due at
//     now (a durable delay swept back by that read, a broker's parked message) has been
//     read and handled first;
//   - and no mount read anything meanwhile; else WaitIdle starts over.
//
// Every settlement of what was handled has been reported (Hooks.Settled, OnSettled)
// when it returns. The clock must not move while it waits. Under a test clock a read
// blocks at most TestBlock, so an idle App is seen within a few of them.
func (p *TestProbe) WaitIdle(ctx context.Context) error {
	tick := time.NewTicker(probeTick)
	defer tick.Stop()
	for {
		p.mu.Lock()
		ms, delays, stopped := p.mounts, p.delays, p.stopped
		p.mu.Unlock()
		if stopped {
			return errors.New("settle: TestProbe.WaitIdle: the App has stopped")
		}
		if len(ms) == 0 {
			if err := waitTick(ctx, tick); err != nil {
				return fmt.Errorf("settle: the App is not running: %w", err)
			}
			continue
		}
		before := uint64(0)
		for _, m := range ms {
			before += m.delivered.Load()
		}
		if busy := p.busy(ms, delays); len(busy) > 0 {
			if err := waitTick(ctx, tick); err != nil {
				return fmt.Errorf("settle: the App is not idle: %s: %w", strings.Join(busy, "; "), err)
			}
			continue
		}
		begun := make([]uint64, len(ms))
		for i, m := range ms {
			begun[i] = m.readsBegun.Load()
		}
		for {
			var reading []string
			for i, m := range ms {
				if m.lastEmpty.Load() <= begun[i] && !m.waitingPaused.Load() {
					reading = append(reading, m.name)
				}
			}
			if len(reading) == 0 {
				break
			}
			if err := waitTick(ctx, tick); err != nil {
				return fmt.Errorf("settle: the App is not idle: no read that found nothing yet from mount %s: %w", strings.Join(reading, ", "), err)
			}
		}
		after := uint64(0)
		for _, m := range ms {
			after += m.delivered.Load()
		}
		if after == before && len(p.busy(ms, delays)) == 0 {
			return nil
		}
	}
}

// busy says what keeps the App from being idle now, one phrase each.
func (p *TestProbe) busy(ms []*mount, delays *timerq.Queue) []string {
	var busy []string
	for _, m := range ms {
		st := m.probed.Load()
		if st == nil {
			busy = append(busy, "mount "+m.name+" is starting")
			continue
		}
		switch held := m.heldNow(st); {
		case held > 0:
			busy = append(busy, fmt.Sprintf("mount %s holds %d deliveries", m.name, held))
		case m.ahead.out.Load() > 0:
			busy = append(busy, fmt.Sprintf("mount %s has a read ahead out", m.name))
		case st.acks.pending.Load() > 0:
			busy = append(busy, fmt.Sprintf("mount %s has %d acks to write", m.name, st.acks.pending.Load()))
		}
		if g := m.gate.Load(); g != nil && g.Due() {
			busy = append(busy, fmt.Sprintf("mount %s has deliveries whose flow limit lets them try again now", m.name))
		}
	}
	if delays != nil && delays.Due() {
		busy = append(busy, "in-process delays due now")
	}
	if n := ms[0].eng.delaying.Load(); n > 0 {
		busy = append(busy, fmt.Sprintf("%d writers of due in-process delays", n))
	}
	return busy
}

// heldNow is held read from another goroutine than the read loop: the slots taken less
// a read's room, read again until no read began or ended meanwhile. The read loop takes
// a read's room before it counts it (reading) and stops counting it before freeing what
// the read did not fill, so a stable answer never counts less than the mount holds.
func (m *mount) heldNow(st *probeState) int {
	for {
		begun, reading := m.readsBegun.Load(), m.reading.Load()
		taken := len(st.slots)
		if m.reading.Load() == reading && m.readsBegun.Load() == begun {
			return taken - int(reading)
		}
	}
}

func waitTick(ctx context.Context, tick *time.Ticker) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tick.C:
		return nil
	}
}

// goDelayed runs fn, the write of in-process delays come due, on its own goroutine,
// counted for Run and for a TestProbe.
func (e *engine) goDelayed(fn func()) {
	e.delaying.Add(1)
	e.delayed.Go(func() {
		defer e.delaying.Add(-1)
		fn()
	})
}
