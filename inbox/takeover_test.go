package inbox

import (
	"strings"
	"testing"
	"time"
)

// TestTakeoverLotFreesOnceEveryRowLeftHoweverItLeft: a lot taken over blocks the next
// until each of its rows has left the worker, whether settled (a failed settlement too:
// it forgets the row all the same) or its lease lost (the heartbeat forgets it), each
// row counted once however often it leaves; a lot that filled its room wakes the queue
// and the next comes at once, one that found fewer waits a poll; Close forgets the lot.
func TestTakeoverLotFreesOnceEveryRowLeftHoweverItLeft(t *testing.T) {
	t.Parallel()
	const poll = time.Minute
	woken := 0
	o := newTakeover(3, poll, false, func() { woken++ })
	k := &leaseKeeper{rows: map[*held]struct{}{}}
	now := time.Now()
	if got := o.want(now, 10); got != 3 {
		t.Fatalf("first want %d, want 3 (the lot's size)", got)
	}
	if got := o.want(now, 2); got != 2 {
		t.Fatalf("want with room for 2: %d, want 2", got)
	}
	lot := []*held{{id: 1}, {id: 2}, {id: 3}}
	o.took(lot, 3, now)
	k.add(lot)
	if got := o.want(now, 10); got != 0 {
		t.Fatalf("want while the lot is held: %d, want 0", got)
	}
	k.forget(lot[0]) // settled
	k.forget(lot[0]) // and again: counted once
	k.forget(lot[1]) // its lease lost
	if got := o.want(now, 10); got != 0 || woken != 0 {
		t.Fatalf("want with one row of the lot held: %d (woken %d), want 0 (not woken)", got, woken)
	}
	k.forget(lot[2])
	if woken != 1 {
		t.Fatalf("woken %d times when the full lot left, want once", woken)
	}
	if got := o.want(now, 10); got != 3 {
		t.Fatalf("want after the full lot left: %d, want 3 at once", got)
	}
	o.took([]*held{{id: 4}}, 3, now)
	o.reset() // Close
	if got := o.want(now, 10); got != 0 {
		t.Fatalf("want right after a takeover that found fewer than asked: %d, want 0 until a poll passed", got)
	}
	if got := o.want(now.Add(poll), 10); got != 3 {
		t.Fatalf("want a poll after a short takeover (lot forgotten at Close): %d, want 3", got)
	}
	o.took(nil, 3, now)
	if got := o.want(now.Add(poll-time.Millisecond), 10); got != 0 {
		t.Fatalf("want before a poll passed after a takeover that found nothing: %d, want 0", got)
	}
	var fifo *takeover
	if got := fifo.want(now, 10); got != 0 {
		t.Fatalf("a FIFO queue's (nil) takeover wants %d, want 0", got)
	}
	always := newTakeover(0, poll, true, nil)
	always.took(nil, 1, now)
	if got := always.want(now, 10); got != 1 {
		t.Fatalf("under a test clock, want %d right after a takeover that found nothing, want 1 (Concurrency 0 read as 1)", got)
	}
}

// TestPlainClaimTakesNullLeasesAndTakeoverPassedOnes: on every dialect a plain queue's
// main claim takes only rows whose lease is NULL and its takeover claim only rows whose
// lease passed, both adding one attempt to a row whose lease was set (claimCount); a
// FIFO queue has one claim taking both, and no takeover.
func TestPlainClaimTakesNullLeasesAndTakeoverPassedOnes(t *testing.T) {
	t.Parallel()
	for _, d := range []dialect{sqlite{}, postgres{}, mysql{}} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			tb := cols{}.spec("jobs")
			c := tb.quoted('"')
			if d.String() == "mysql" {
				c = tb.quoted('`')
			}
			texts := func(s *statements) (claim, takeover string) {
				if d.String() == "mysql" {
					return s.claimSelect.text, s.takeoverSelect.text
				}
				return s.claim.text, s.takeover.text
			}
			plain, fifo := d.build(tb, queueSpec{}), d.build(tb, queueSpec{fifo: true})
			claim, takeover := texts(plain)
			if !strings.Contains(claim, c.lease+" IS NULL AND") || strings.Contains(claim, c.lease+" <=") {
				t.Errorf("plain claim %s: want rows whose lease is NULL only", claim)
			}
			if takeover == "" || strings.Contains(takeover, c.lease+" IS NULL OR") || strings.Contains(takeover, c.lease+" IS NULL AND") || !strings.Contains(takeover, c.lease+" <=") {
				t.Errorf("plain takeover %s: want rows whose lease passed only", takeover)
			}
			if d.String() != "mysql" && !strings.Contains(takeover, c.claimCount()) {
				t.Errorf("plain takeover %s: want one attempt added in the same statement", takeover)
			}
			claim, takeover = texts(fifo)
			if !strings.Contains(claim, c.lease+" IS NULL OR "+c.lease+" <=") || takeover != "" {
				t.Errorf("FIFO claim %q, takeover %q: want one claim of rows whose lease is NULL or passed, no takeover", claim, takeover)
			}
		})
	}
}
