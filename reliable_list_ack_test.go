package settle_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/settlekit/settle"
)

// An ack of a ReliableList item that another consumer recovered in the meantime (this
// consumer's heartbeat lapsed) finds the item gone: the message will be delivered again,
// so its settlement is reported failed; the items acked in the same batch are reported
// applied.
func TestReliableListAckOfAnItemRecoveredElsewhereIsReportedFailedAlone(t *testing.T) {
	t.Parallel()
	v := newValueMount(t, "ReliableList")
	rdb := v.h.Redis.Client
	var both sync.WaitGroup
	both.Add(2)
	r := &recorder{fn: func(m *settle.Message) error {
		if strings.Contains(string(m.Payload), "gone") {
			// Another consumer recovers this item while the handler runs.
			items, err := rdb.LRange(context.Background(), v.processing(), 0, -1).Result()
			if err != nil {
				return settle.Drop(err)
			}
			for _, it := range items {
				if strings.Contains(it, "gone") {
					if err := rdb.LRem(context.Background(), v.processing(), 1, it).Err(); err != nil {
						return settle.Drop(err)
					}
				}
			}
		}
		// Both handlers return together, so their acks share a batch when they can.
		both.Done()
		both.Wait()
		return nil
	}}
	v.mount(r, settle.Concurrency(2))
	v.start(t)
	v.publish(t, "refund-gone", nil)
	v.publish(t, "refund-kept", nil)
	evs := v.h.WaitAction(settle.ActionAck, 2)
	if len(r.deliveries()) != 2 {
		t.Fatalf("%d deliveries, want 2", len(r.deliveries()))
	}
	var failed, applied int
	for _, e := range evs {
		if e.Action != settle.ActionAck {
			continue
		}
		if e.Err != nil {
			if !strings.Contains(e.Err.Error(), "no longer in the processing list") {
				t.Fatalf("ack failed with %v, want the item-gone error", e.Err)
			}
			failed++
		} else {
			applied++
		}
	}
	if failed != 1 || applied != 1 {
		t.Fatalf("acks: %d failed, %d applied; want the recovered item's failed and the other applied", failed, applied)
	}
}
