package settle

import (
	"testing"

	"github.com/settlekit/settle/internal/source"
)

// TestSpentByCrashes is the table of the one decision made before a handler runs: a
// delivery whose attempts were spent by deliveries that never settled.
func TestSpentByCrashes(t *testing.T) {
	t.Parallel()
	counter := source.Caps{CountsUnsettled: true, DeliveryCounter: true}
	// An inbox: its attempt column counts a claim of a row whose lease passed; a table
	// has no retry-count header (RetryCount 0).
	table := source.Caps{CountsUnsettled: true, Parks: true, RetryWithoutCap: source.ActionPutBack}
	capped := source.Policy{DeadLetter: "dlq", MaxAttempts: 5}
	tests := []struct {
		name string
		d    source.Delivery
		p    source.Policy
		c    source.Caps
		want bool
	}{
		{"AtTheCapRuns", source.Delivery{Attempt: 5}, capped, counter, false},
		{"PastTheCapAfterACrashedDeliveryIsSpent", source.Delivery{Attempt: 6}, capped, counter, true},
		{"PastTheCapWithRetryCountAfterACrashIsSpent", source.Delivery{Attempt: 6, RetryCount: 4}, capped, counter, true},
		{"FirstDeliveryWithAHighRetryCountRuns", source.Delivery{Attempt: 6, RetryCount: 5}, capped, counter, false},
		{"NoCapNeverSpent", source.Delivery{Attempt: 60}, source.Policy{}, counter, false},
		{"CopyCountingTransportNeverSpent", source.Delivery{Attempt: 6, RetryCount: 5}, capped, source.Caps{RetryWithoutCap: source.ActionCopy}, false},
		{"DeliveryCounterAloneNeverSpent", source.Delivery{Attempt: 6}, capped, source.Caps{DeliveryCounter: true}, false},
		{"InboxRowAtTheCapRuns", source.Delivery{Attempt: 5}, capped, table, false},
		{"InboxRowPastTheCapIsSpent", source.Delivery{Attempt: 6}, capped, table, true},
		{"InboxRowFarPastTheCapIsSpent", source.Delivery{Attempt: 9}, capped, table, true},
		{"InboxWithoutCapNeverSpent", source.Delivery{Attempt: 9}, source.Policy{}, table, false},
		{"FirstDeliveryAtAttemptOneNeverSpent", source.Delivery{Attempt: 1}, source.Policy{DeadLetter: "dlq", MaxAttempts: 1}, table, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := spentByCrashes(&tt.d, tt.p, tt.c); got != tt.want {
				t.Fatalf("spentByCrashes(%+v) = %v, want %v", tt.d, got, tt.want)
			}
		})
	}
}
