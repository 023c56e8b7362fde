package soak

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/ledger"
)

// The flow-limit soak: every option on one mount, its workers killed with SIGKILL.
const (
	// limitKeys is how many values the soak's RateLimitBy and ConcurrencyBy see.
	limitKeys = 40
	// twinSuffix marks a twin: a message published right after another, with its
	// Dedupe key (the other's id).
	twinSuffix = "~twin"
	// actionDeduplicated is the ledger's action for a delivery acked without a run.
	actionDeduplicated = "deduplicated"
	// kindDedupCheck is the ledger line a worker writes before it reads a delivery's
	// Dedupe mark.
	kindDedupCheck = ledger.Kind("dedup_check")
)

// dedupKey is a message's Dedupe key: a twin's is its original's id.
func dedupKey(id string) string { return strings.TrimSuffix(id, twinSuffix) }

// limitKey is the RateLimitBy and ConcurrencyBy value of a message: one of limitKeys,
// by its Dedupe key (a twin and its original share it, so they never run at once).
func limitKey(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(dedupKey(id)))
	return fmt.Sprintf("k%d", h.Sum32()%limitKeys)
}

func dedupSettleKey(delivery string, attempt int) string {
	return "dedup/" + settleKey(delivery, attempt)
}

// limitOptions are the soak's flow limits and Dedupe, loose enough that a drain ends:
// the Dedupe key function writes the kindDedupCheck line before the mark is read.
func limitOptions(w *ledger.Writer, ids *sync.Map) []settle.MountOption {
	byKey := func(m *settle.Message) string { return limitKey(messageID(m)) }
	return []settle.MountOption{
		settle.RateLimit(400, time.Second, settle.LimitBurst(20)),
		settle.RateLimitBy(byKey, 50, time.Second),
		settle.ConcurrencyBy(byKey, 1),
		settle.GlobalConcurrency(12),
		settle.Dedupe(time.Hour, func(m *settle.Message) string {
			id := messageID(m)
			ids.Store(dedupSettleKey(m.ID, m.Attempt), id)
			if err := w.Append(ledger.Event{Kind: kindDedupCheck, ID: id, Delivery: m.ID, Attempt: m.Attempt}); err != nil {
				panic(err)
			}
			return dedupKey(id)
		}),
	}
}

// TestSoakFlowLimitsSurviveKill9: a Stream with Reclaim, then a ReliableList, with
// RateLimit, RateLimitBy, ConcurrencyBy(…, 1), GlobalConcurrency and Dedupe on the
// mount, three workers killed
// with SIGKILL at random moments and restarted until it is drained. Every fifth message
// has a twin of the same Dedupe key. The ledger holds for every other message (none
// lost, every duplicate explained); every twin pair ends each member in one final state
// (or deduplicated); no run's Dedupe check began after its key's completion was
// recorded (0 runs past a completed mark); and a key whose slot a killed worker held
// runs again, in another worker, within SlotLease of the kill (no slot held past the
// heartbeat bound).
func TestSoakFlowLimitsSurviveKill9(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transport string
		idle      time.Duration
	}{
		{"StreamReclaim", transportStream, 2 * time.Second},
		{"ReliableList", transportReliable, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { limitSoak(t, tc.transport, tc.idle) })
	}
}

// limitSoak is TestSoakFlowLimitsSurviveKill9 on one transport, idle its min-idle or
// heartbeat.
func limitSoak(t *testing.T, transport string, idle time.Duration) {
	s := redisSubject(t, transport)
	s.cfg.Limits = true
	s.cfg.Idle = idle
	seed := soakSeed(t)
	h := newHarness(t, s.cfg, seed)
	start := time.Now()
	for slot := range 3 {
		h.start(slot)
	}
	const messages = 600
	var ids []string
	for i := range messages {
		ids = append(ids, fmt.Sprintf("m%05d", i))
		if i%5 == 0 {
			ids = append(ids, ids[len(ids)-1]+twinSuffix)
		}
	}
	ctx := context.Background()
	publishAndDrain(h, s, ids, plan{deadline: 75 * time.Second, maxKills: 6, minInterval: 300 * time.Millisecond, maxInterval: 900 * time.Millisecond})
	drainedAfter := time.Since(start)
	h.stopAll()

	dead, err := s.dead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ledger.Read(h.ledger)
	if err != nil {
		t.Fatal(err)
	}
	paired := func(id string) bool {
		k := dedupKey(id)
		var n int
		fmt.Sscanf(k, "m%05d", &n)
		return n%5 == 0
	}
	// A settlement without a run (attempts spent by crashed deliveries) names only its
	// delivery: name its message from the runs and dead letters before splitting.
	byDelivery := map[string]string{}
	for _, e := range evs {
		if e.Kind == ledger.KindRun {
			byDelivery[e.Delivery] = e.ID
		}
	}
	for _, d := range dead {
		if d.Delivery != "" {
			byDelivery[d.Delivery] = d.ID
		}
	}
	for i, e := range evs {
		if e.Kind == ledger.KindSettle && e.ID == "" {
			evs[i].ID = byDelivery[e.Delivery]
		}
	}
	var rest []ledger.Event
	pairs := map[string][]ledger.Event{}
	for _, e := range evs {
		switch {
		case e.ID != "" && paired(e.ID):
			pairs[dedupKey(e.ID)] = append(pairs[dedupKey(e.ID)], e)
		case e.Kind != kindDedupCheck:
			rest = append(rest, e)
		}
	}
	var restDead, pairDead []ledger.Dead
	for _, d := range dead {
		if paired(d.ID) {
			pairDead = append(pairDead, d)
		} else {
			restDead = append(restDead, d)
		}
	}
	rep := ledger.Check(ledger.Input{Events: rest, Dead: restDead, MaxAttempts: s.cfg.Cap})
	t.Logf("%s: %d messages and %d twins drained in %s: %s", transport, messages, len(pairs), drainedAfter.Round(time.Millisecond), rep)
	if !rep.OK() {
		t.Fatalf("the ledger does not hold (seed %d):\n%s", seed, firstProblems(rep, 30))
	}
	if rep.Kills == 0 {
		t.Fatal("no worker was killed: the soak proved nothing about crashes")
	}
	dedups := checkPairs(t, evs, pairs, pairDead)
	freed := checkSlotsFreed(t, evs)
	t.Logf("twin pairs: %d deduplicated deliveries; keys held by a killed worker that ran again elsewhere: %d, the longest after %s (SlotLease %s)",
		dedups, freed.n, freed.longest, settle.SlotLease)
}

// checkPairs judges the twin pairs: each member ends once (an applied final
// settlement, a dead letter, deduplicated, or, its process killed before it recorded
// it, an ack or a Dedupe check as its last line), and no run's Dedupe check (its kindDedupCheck line) came after the
// first applied ack of either member. It returns how many deliveries were deduplicated.
func checkPairs(t *testing.T, all []ledger.Event, pairs map[string][]ledger.Event, dead []ledger.Dead) int {
	t.Helper()
	killed := map[int]bool{}
	for _, e := range all {
		if e.Kind == ledger.KindKill {
			killed[e.PID] = true
		}
	}
	deadOf := map[string]bool{}
	for _, d := range dead {
		deadOf[d.ID] = true
	}
	dedups := 0
	for key, evs := range pairs {
		marked := -1 // seq of the first applied ack of the pair
		final := map[string]bool{}
		lastOutcome := map[string]ledger.Event{}
		last := map[string]ledger.Event{}
		type run struct {
			pid      int
			delivery string
			attempt  int
		}
		checks := map[run]int{} // the seq of each delivery's last Dedupe check
		for _, e := range evs {
			last[e.ID] = e
			switch e.Kind {
			case kindDedupCheck:
				checks[run{e.PID, e.Delivery, e.Attempt}] = e.Seq
			case ledger.KindRun:
				if c, ok := checks[run{e.PID, e.Delivery, e.Attempt}]; ok && marked >= 0 && c > marked {
					t.Fatalf("pair %s: %s ran (ledger line %d) after a Dedupe check that began at line %d, after its key was completed at line %d: a run past a completed mark", key, e.ID, e.Seq, c, marked)
				}
			case ledger.KindOutcome:
				lastOutcome[e.ID] = e
			case ledger.KindSettle:
				if e.Err != "" {
					continue
				}
				switch e.Action {
				case actionDeduplicated:
					dedups++
					final[e.ID] = true
				case "ack", "reply":
					if marked < 0 {
						marked = e.Seq
					}
					final[e.ID] = true
				case "drop", "reject", "dead_letter":
					final[e.ID] = true
				}
			}
		}
		for _, id := range []string{key, key + twinSuffix} {
			// Unconfirmed, the source being drained: an ack whose process was killed
			// before it recorded the settlement, or a Dedupe check that found the key
			// completed and acked, its process killed before it recorded that.
			o, ok := lastOutcome[id]
			acked := ok && o.Outcome == "ack" && killed[o.PID]
			deduped := last[id].Kind == kindDedupCheck && killed[last[id].PID]
			if !final[id] && !deadOf[id] && !acked && !deduped {
				var b strings.Builder
				for _, e := range evs {
					fmt.Fprintf(&b, "%+v\n", e)
				}
				t.Fatalf("pair %s: %s has no final state (lost); the pair's ledger lines:\n%s", key, id, b.String())
			}
		}
	}
	return dedups
}

// freedSlots is what checkSlotsFreed saw.
type freedSlots struct {
	n       int
	longest time.Duration
}

// checkSlotsFreed checks that a key whose delivery was running in a worker when it was
// killed (a run without a settlement) ran again, when it did, within SlotLease of the
// kill plus the takeover (the stream's min-idle) and a margin for the machine's load.
func checkSlotsFreed(t *testing.T, evs []ledger.Event) freedSlots {
	t.Helper()
	const bound = settle.SlotLease + 5*time.Second
	running := map[int]map[string]bool{} // pid -> deliveries running (run, no settlement)
	keyOf := map[string]string{}         // delivery -> limit key
	var out freedSlots
	waiting := map[string]int64{} // key -> kill time (ms) of a worker that held it
	for _, e := range evs {
		switch e.Kind {
		case ledger.KindRun:
			k := limitKey(e.ID)
			if at, ok := waiting[k]; ok {
				d := time.Duration(e.Time-at) * time.Millisecond
				if d > bound {
					t.Fatalf("key %s ran again %s after the kill of the worker that held its slot, want within %s", k, d, bound)
				}
				out.n++
				out.longest = max(out.longest, d)
				delete(waiting, k)
			}
			if running[e.PID] == nil {
				running[e.PID] = map[string]bool{}
			}
			running[e.PID][e.Delivery] = true
			keyOf[e.Delivery] = k
		case ledger.KindSettle:
			delete(running[e.PID], e.Delivery)
		case ledger.KindKill:
			for d := range running[e.PID] {
				waiting[keyOf[d]] = e.Time
			}
			delete(running, e.PID)
		}
	}
	return out
}
