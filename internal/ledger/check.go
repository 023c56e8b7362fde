package ledger

import (
	"fmt"
	"sort"
	"strings"
)

// Dead is one dead letter read from the dead-letter destination after the drain.
type Dead struct {
	// Attempt is the attempts spent, as the dead letter carries it (its retry-count
	// header, or a table's attempt column).
	Attempt int
	// Delivery is the id of the delivery that was dead-lettered, when the dead letter
	// says (settle.HeaderDeadID): it finds the message of a dead-letter settlement the
	// engine made without running the handler.
	Delivery string
	// ID is the message's own id.
	ID string
}

// Input is what Check judges.
type Input struct {
	// Dead is every dead letter found in the dead-letter destination after the drain.
	Dead []Dead
	// Events is the whole ledger, in file order (Read).
	Events []Event
	// MaxAttempts, when positive, is the mount's cap: every dead letter must carry it.
	MaxAttempts int
	// RepliesLost says the run had connection faults or server restarts that can lose a
	// read's reply: the transport delivered a message the consumer never saw. A
	// transport that counts unsettled deliveries (a stream, a claiming stream) then
	// charges that delivery an attempt, so a retry may reach no handler and the message
	// be dead-lettered at the cap without running, with no process killed.
	RepliesLost bool
}

// State is a message's final state.
type State string

// The final states.
const (
	StateAcked        State = "acked"
	StateDropped      State = "dropped"
	StateDeadLettered State = "dead_lettered"
	// StateAckedUnconfirmed: the last handler run returned ack (or drop) in a process
	// killed before it could record the settlement, or its ack (or drop) was reported
	// failed (the server died after applying it, before its reply), and no delivery
	// followed: the settlement applied (the caller checked that the transport is
	// drained, so the message is not pending anywhere).
	StateAckedUnconfirmed State = "acked_unconfirmed"
)

// Report is Check's verdict and its figures.
type Report struct {
	// Published counts the messages published.
	Published int
	// States counts messages by final state.
	States map[State]int
	// Runs counts handler runs; Settlements counts settlements reported.
	Runs, Settlements int
	// Starts and Kills count consumer processes started and killed with SIGKILL.
	Starts, Kills int
	// Duplicates counts handler runs that no settlement asked for: redeliveries after a
	// run that never settled. ByCrash, ByFailedSettlement and ByExpiry count the
	// explanations found for them: runs in flight when their process was killed, runs
	// whose settlement failed to apply, and runs started while another run of the same
	// message was in flight and went on to settle it (a lease or min-idle expiry).
	Duplicates, ByCrash, ByFailedSettlement, ByExpiry int
	// UnranRetries counts retries that reached no handler: delivered to a process that
	// was killed before the handler started (a kill after the retry explains each).
	UnranRetries int
	// Problems lists every broken promise; empty when the ledger holds.
	Problems []string
	// Final is each published message's final state.
	Final map[string]State
}

// OK reports whether the ledger holds.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// String summarizes the figures.
func (r Report) String() string {
	var states []string
	for _, s := range []State{StateAcked, StateAckedUnconfirmed, StateDropped, StateDeadLettered} {
		states = append(states, fmt.Sprintf("%s %d", s, r.States[s]))
	}
	return fmt.Sprintf("published %d (%s); runs %d, settlements %d; processes %d, killed %d; duplicates %d (explanations: crash %d, failed settlement %d, expiry %d); retries lost with a killed process before their handler ran %d; problems %d",
		r.Published, strings.Join(states, ", "), r.Runs, r.Settlements, r.Starts, r.Kills,
		r.Duplicates, r.ByCrash, r.ByFailedSettlement, r.ByExpiry, r.UnranRetries, len(r.Problems))
}

// run is one handler run with what followed it in its process.
type run struct {
	ev      Event
	outcome *Event
	settle  *Event
}

func (r *run) applied() bool { return r.settle != nil && r.settle.Err == "" }

// completes reports whether an action ends the message's life in its source.
func completes(action string) bool {
	switch action {
	case "ack", "reply", "drop", "reject", "lose", "dead_letter":
		return true
	}
	return false
}

// Check judges a ledger after a full drain (the caller has checked that nothing is left
// pending, delayed or leased in the transport). The rules, per published message:
//
//   - exactly one final state: one applied ack/drop settlement, or one dead letter in the
//     destination (an applied dead-letter settlement must have one there), or, when the
//     last run returned ack in a process killed before it recorded the settlement, or
//     its ack was reported failed and no delivery followed (the reply was lost, not the
//     ack), that ack (StateAckedUnconfirmed); several only when explained by an expiry;
//   - no run starts after an applied final settlement of the message;
//   - every run ends in a settlement, unless its process was killed; a settlement whose
//     write failed may be written again without a run, in the same process, for the
//     same delivery, attempt and action (the message came back): it is then the run's;
//   - the duplicates (runs beyond the first and those the applied retries asked for) are
//     at most the crashes, failed settlements and expiries that explain them; fewer runs
//     than asked only when a process was killed after the last retry (the delivery died
//     with it before its handler ran);
//   - every dead letter carries MaxAttempts.
//
// And overall: no message published twice, no run, settlement or dead letter of a
// message never published.
func Check(in Input) Report {
	rep := Report{States: map[State]int{}, Final: map[string]State{}}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}

	published := map[string]int{}
	killedAt := map[int]int{} // pid -> seq of its kill line
	runs := map[string][]*run{}
	type key struct {
		pid      int
		delivery string
		attempt  int
	}
	open := map[key][]*run{}   // runs of a delivery in a process, awaiting outcome/settlement
	failedAt := map[key]*run{} // the last run of a delivery in a process whose settlement failed
	byDelivery := map[string]string{}
	var orphanSettles []Event

	for _, e := range in.Events {
		switch e.Kind {
		case KindPublish:
			published[e.ID]++
		case KindStart:
			rep.Starts++
		case KindKill:
			rep.Kills++
			killedAt[e.PID] = e.Seq
		case KindRun:
			rep.Runs++
			r := &run{ev: e}
			runs[e.ID] = append(runs[e.ID], r)
			k := key{e.PID, e.Delivery, e.Attempt}
			open[k] = append(open[k], r)
			byDelivery[e.Delivery] = e.ID
		case KindOutcome:
			k := key{e.PID, e.Delivery, e.Attempt}
			if rs := open[k]; len(rs) > 0 && rs[len(rs)-1].outcome == nil {
				ev := e
				rs[len(rs)-1].outcome = &ev
			} else {
				problem("outcome without a run: %+v", e)
			}
		case KindSettle:
			rep.Settlements++
			k := key{e.PID, e.Delivery, e.Attempt}
			if rs := open[k]; len(rs) > 0 {
				ev := e
				rs[0].settle = &ev
				if ev.Err != "" {
					failedAt[k] = rs[0]
				}
				open[k] = rs[1:]
				if len(open[k]) == 0 {
					delete(open, k)
				}
			} else if r := failedAt[k]; r != nil && r.settle.Action == e.Action {
				// The engine wrote again, without a handler run, the settlement whose
				// write failed (the message came back to the same process): it is that
				// run's settlement now.
				ev := e
				r.settle = &ev
				if ev.Err == "" {
					delete(failedAt, k)
				}
			} else {
				orphanSettles = append(orphanSettles, e)
			}
		}
	}
	rep.Published = len(published)
	for id, n := range published {
		if n > 1 {
			problem("message %s published %d times", id, n)
		}
	}

	for _, d := range in.Dead {
		if d.Delivery != "" {
			byDelivery[d.Delivery] = d.ID
		}
	}
	// A settlement without a run in its process: the engine settled a delivery without
	// calling the handler (attempts already spent by crashed deliveries). Only a dead
	// letter or a reject may come that way; find the message by its delivery id.
	runless := map[string][]Event{}
	for _, e := range orphanSettles {
		id := e.ID
		if id == "" {
			id = byDelivery[e.Delivery]
		}
		switch {
		case id == "":
			problem("settlement of an unknown delivery: %+v", e)
		case published[id] == 0:
			problem("settlement of message %s, never published: %+v", id, e)
		case e.Action != "dead_letter" && e.Action != "reject":
			problem("message %s: settlement %s without a handler run: %+v", id, e.Action, e)
		default:
			runless[id] = append(runless[id], e)
		}
	}

	dead := map[string][]Dead{}
	for _, d := range in.Dead {
		dead[d.ID] = append(dead[d.ID], d)
		if published[d.ID] == 0 {
			problem("dead letter of message %q, never published", d.ID)
		}
		if in.MaxAttempts > 0 && d.Attempt != in.MaxAttempts {
			problem("message %s: dead letter carries attempt %d, want the cap %d", d.ID, d.Attempt, in.MaxAttempts)
		}
	}
	for id := range runs {
		if published[id] == 0 {
			problem("message %q handled but never published", id)
		}
	}

	killedSince := func(seq int) bool {
		for _, at := range killedAt {
			if at > seq {
				return true
			}
		}
		return false
	}
	ids := make([]string, 0, len(published))
	for id := range published {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rs := runs[id]
		killed := func(r *run) bool {
			at, ok := killedAt[r.ev.PID]
			return ok && at > r.ev.Seq
		}
		var acked, dropped, deadApplied, asked, crashed, failed, expiry int
		lastAsked := -1 // seq of the last applied retry
		finalAt := -1   // seq of the first applied final settlement
		for _, r := range rs {
			switch {
			case r.settle == nil && killed(r):
				crashed++
			case r.settle == nil:
				problem("message %s: run %+v never settled, and its process was not killed", id, r.ev)
			case r.settle.Err != "":
				failed++
			case r.settle.Action == "ack" || r.settle.Action == "reply": // a reply completes as an ack does
				acked++
			case r.settle.Action == "drop" || r.settle.Action == "reject" || r.settle.Action == "lose":
				dropped++
			case r.settle.Action == "dead_letter":
				deadApplied++
			default:
				asked++ // a retry: copy, park, leave, put back
				lastAsked = max(lastAsked, r.settle.Seq)
			}
			if r.applied() && completes(r.settle.Action) && (finalAt < 0 || r.settle.Seq < finalAt) {
				finalAt = r.settle.Seq
			}
		}
		for _, e := range runless[id] {
			if e.Action == "dead_letter" {
				deadApplied++
			} else {
				dropped++
			}
		}
		// Expiry: a run started while an earlier run of the message was in flight and
		// that earlier run then settled it for good.
		for j, rj := range rs {
			for _, ri := range rs[:j] {
				if ri.applied() && completes(ri.settle.Action) && rj.ev.Seq < ri.settle.Seq {
					expiry++
					break
				}
			}
		}
		for _, r := range rs {
			if finalAt >= 0 && r.ev.Seq > finalAt {
				problem("message %s: delivered again after it was settled for good (run %+v)", id, r.ev)
			}
		}

		nDead := len(dead[id])
		if nDead > 1 {
			problem("message %s: %d dead letters", id, nDead)
		}
		if deadApplied > 0 && nDead == 0 {
			problem("message %s: dead-lettered (settlement applied) but not in the dead-letter destination: lost", id)
		}
		inferred := 0
		if acked+dropped+nDead == 0 && len(rs) > 0 {
			last := rs[len(rs)-1]
			switch {
			case last.settle == nil && killed(last) && last.outcome != nil && (last.outcome.Outcome == "ack" || last.outcome.Outcome == "drop"):
				inferred = 1
			case last.settle != nil && last.settle.Err != "" && (last.settle.Action == "ack" || last.settle.Action == "reply" || last.settle.Action == "drop"):
				// The server applied the ack and lost its reply (killed between writing it
				// to its log and answering): the error says the reply failed, not the ack.
				inferred = 1
			}
		}
		switch states := acked + dropped + nDead + inferred; {
		case states == 0:
			var last string
			if len(rs) > 0 {
				l := rs[len(rs)-1]
				last = fmt.Sprintf("; last run %+v, outcome %+v, settlement %+v", l.ev, l.outcome, l.settle)
			}
			problem("message %s lost: no final state (%d runs%s)", id, len(rs), last)
			continue
		case states > 1 && expiry == 0:
			problem("message %s in %d final states (acked %d, dropped %d, dead letters %d) with no expiry to explain it", id, states, acked, dropped, nDead)
		}
		switch {
		case nDead > 0:
			rep.Final[id] = StateDeadLettered
		case acked > 0:
			rep.Final[id] = StateAcked
		case dropped > 0:
			rep.Final[id] = StateDropped
		default:
			rep.Final[id] = StateAckedUnconfirmed
		}
		rep.States[rep.Final[id]]++

		dups := len(rs) - 1 - asked
		if len(rs) == 0 {
			dups = 0
		}
		if dups < 0 {
			// A retry that reached no handler: fine only if it died with a process killed
			// after it was asked for (delivered, then lost with the process before its
			// handler ran; a transport counting such deliveries may then dead-letter it),
			// or, when replies may have been lost, if the message was dead-lettered
			// without a run (a delivery lost with its read's reply spent its last attempt).
			if !killedSince(lastAsked) && !(in.RepliesLost && len(runless[id]) > 0) {
				problem("message %s: %d runs for %d retries asked, and no process died after the last retry: a retry was never delivered", id, len(rs), asked)
			}
			rep.UnranRetries -= dups
			continue
		}
		rep.Duplicates += dups
		if dups > crashed+failed+expiry {
			problem("message %s: %d duplicate runs, but only %d crashes, %d failed settlements and %d expiries explain them", id, dups, crashed, failed, expiry)
		}
		// Attribute each duplicate to one explanation, crashes first.
		for _, n := range []struct {
			have int
			to   *int
		}{{crashed, &rep.ByCrash}, {failed, &rep.ByFailedSettlement}, {expiry, &rep.ByExpiry}} {
			take := min(dups, n.have)
			*n.to += take
			dups -= take
		}
	}
	return rep
}
