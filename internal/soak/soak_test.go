package soak

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/ledger"
)

// profile is a soak's size: the short one CI runs, or SETTLE_SOAK=full.
type profile struct {
	messages int
	plan     plan
}

func soakProfile() profile {
	if os.Getenv("SETTLE_SOAK") == "full" {
		return profile{messages: 10000, plan: plan{deadline: 10 * time.Minute, maxKills: 80, minInterval: 100 * time.Millisecond, maxInterval: 800 * time.Millisecond}}
	}
	return profile{messages: 1000, plan: plan{deadline: 2 * time.Minute, maxKills: 15, minInterval: 100 * time.Millisecond, maxInterval: 600 * time.Millisecond}}
}

// soakSeed is SETTLE_SOAK_SEED, or a fresh seed; the test logs it.
func soakSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv("SETTLE_SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("SETTLE_SOAK_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay with SETTLE_SOAK_SEED=%d)", seed, seed)
	return seed
}

// soak publishes the profile's messages to s while three workers consume them, kills
// workers with SIGKILL at random moments and restarts them until s is drained, stops the
// workers gracefully and judges the ledger: every message in exactly one final state,
// none lost, none unexpected, every duplicate explained, and every message whose
// handler always fails dead-lettered at the cap.
//
// The soaks do not run in parallel: each runs three processes (with the race detector in
// CI) on a small machine, and a starved process misses the heartbeats that keep its
// deliveries its own.
func soak(t *testing.T, s subject, idle time.Duration) {
	pr := soakProfile()
	seed := soakSeed(t)
	s.cfg.Idle = idle
	h := newHarness(t, s.cfg, seed)
	start := time.Now()
	for slot := range 3 {
		h.start(slot)
	}

	ids := make([]string, pr.messages)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%05d", i)
	}
	ctx := context.Background()
	publishAndDrain(h, s, ids, pr.plan)
	drainedAfter := time.Since(start)
	h.stopAll()

	dead, err := s.dead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep := h.check(dead, s.cfg.Cap)
	t.Logf("%s: %d messages drained in %s: %s", s.cfg.Transport, pr.messages, drainedAfter.Round(time.Millisecond), rep)
	if !rep.OK() {
		t.Fatalf("the ledger does not hold (seed %d):\n%s", seed, firstProblems(rep, 30))
	}
	if rep.Published != pr.messages {
		t.Fatalf("got %d messages in the ledger, want %d", rep.Published, pr.messages)
	}
	for id, st := range rep.Final {
		if alwaysFails(seed, id) && st != ledger.StateDeadLettered {
			t.Fatalf("message %s always fails but ended %s, want %s", id, st, ledger.StateDeadLettered)
		}
	}
	if rep.Kills == 0 {
		t.Fatalf("no worker was killed: the soak proved nothing about crashes")
	}
}

// TestSoakStreamReclaimSurvivesKill9: a Stream with Reclaim, in-process delays.
func TestSoakStreamReclaimSurvivesKill9(t *testing.T) {
	soak(t, redisSubject(t, transportStream), 2*time.Second)
}

// TestSoakClaimingStreamSurvivesKill9: a ClaimingStream (retries left pending, attempts
// from Redis's delivery counter).
func TestSoakClaimingStreamSurvivesKill9(t *testing.T) {
	soak(t, redisSubject(t, transportClaiming), time.Second)
}

// TestSoakStreamDurableDelaysSurviveKill9: a Stream with Reclaim and its RetryAfter
// delays in a DurableZset.
func TestSoakStreamDurableDelaysSurviveKill9(t *testing.T) {
	soak(t, redisSubject(t, transportZset), 2*time.Second)
}

// TestSoakReliableListSurvivesKill9: a ReliableList, whose dead consumers' processing
// lists are recovered once their heartbeat expires.
func TestSoakReliableListSurvivesKill9(t *testing.T) {
	soak(t, redisSubject(t, transportReliable), time.Second)
}

// TestSoakInboxPostgresSurvivesKill9: a SQL inbox on PostgreSQL, whose rows come back
// when a dead worker's lease passes.
func TestSoakInboxPostgresSurvivesKill9(t *testing.T) {
	soak(t, inboxSubject(t), 2*time.Second)
}

// publishAndDrain publishes ids to s (each written to the ledger first) while h
// supervises its workers with pl, and returns once s is drained.
func publishAndDrain(h *harness, s subject, ids []string, pl plan) {
	h.t.Helper()
	published := make(chan error, 1)
	go func() {
		for _, id := range ids {
			if err := h.w.Publish(id); err != nil {
				published <- err
				return
			}
			if err := s.publish(context.Background(), id, []byte(id)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	var pubErr error
	pubDone := false
	h.supervise(pl, func(ctx context.Context) (bool, error) {
		if !pubDone {
			select {
			case pubErr = <-published:
				pubDone = true
			default:
				return false, nil
			}
		}
		if pubErr != nil {
			return false, fmt.Errorf("publish: %w", pubErr)
		}
		return s.drained(ctx, h.consumers)
	})
}
