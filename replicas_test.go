package settle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestWaitReplicasWithoutReplicasWarnsOnceAndSaysEachSettlementWasApplied: on a server
// with no replica (the tests' own), WaitReplicas(1, …) is warned about when Run starts
// (where the server answers INFO replication: not miniredis), and each settlement is
// applied on the primary and reported as exactly that, unconfirmed, never as a
// failure that leaves the message where it was.
func TestWaitReplicasWithoutReplicasWarnsOnceAndSaysEachSettlementWasApplied(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	const n = 3
	for i := range n {
		b.Publish(t, i, nil)
	}
	sourcetest.RunApp(t, b.App(t, b.Stream(), sourcetest.Ack, settle.WaitReplicas(1, 20*time.Millisecond)))
	// Reported with an error, an unconfirmed settlement is not final (Settled.Final).
	evs := b.Rec.WaitFor(t, sourcetest.WaitBound, "the settlements", func(evs []settle.Settled) bool { return len(evs) >= n })
	for _, e := range evs {
		if e.Action != settle.ActionAck || e.Err == nil || !strings.Contains(e.Err.Error(), "applied on the primary") {
			t.Fatalf("settlement %+v; want an ack applied on the primary and reported unconfirmed", e)
		}
	}
	if p := b.Pending(t); p != 0 {
		t.Fatalf("%d entries pending; want every ack applied", p)
	}
	if got := b.Logs.Containing("stays where the transport keeps it"); len(got) != 0 {
		t.Fatalf("an applied settlement was logged as failed: %+v", got)
	}
	if got := b.Logs.Containing("not confirmed by enough replicas"); len(got) != n {
		t.Fatalf("%d lines say a settlement was unconfirmed; want %d", len(got), n)
	}
	if b.R.Mini == nil {
		if warned := b.Logs.Containing("asks for more replicas than the server reports"); len(warned) != 1 || warned[0].Attrs["connected"] != "0" {
			t.Fatalf("warnings %+v; want one, saying 0 replicas are connected", warned)
		}
	}
}
