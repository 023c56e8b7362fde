package settle

import (
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

func TestDecideDelayLongerThanDurableZsetTTL(t *testing.T) {
	t.Parallel()

	var (
		zsetTTL1m  = delayed.DurableZset{Key: "d", TTL: time.Minute}
		zsetNoTTL  = delayed.DurableZset{Key: "d"}
		streamZset = source.Caps{Parks: true, RetryWithoutCap: source.ActionCopy}
		claimZset  = source.Caps{DeliveryCounter: true, MinIdle: 30 * time.Second, Parks: true, RetryWithoutCap: source.ActionLeave}
		after      = func(d time.Duration) Outcome { return Outcome{Kind: OutcomeRetryAfter, Delay: d, Err: errBoomDelay} }
	)

	tests := []struct {
		name    string
		outcome Outcome
		attempt int
		policy  source.Policy
		caps    source.Caps
		want    source.Action
		delay   time.Duration
		refused bool
	}{
		{name: "DelayWithinTTLParks", outcome: after(30 * time.Second), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: source.ActionPark, delay: 30 * time.Second},
		{name: "DelayEqualToTTLParks", outcome: after(time.Minute), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: source.ActionPark, delay: time.Minute},
		{name: "DelayLongerThanTTLRetriesNowWithCopy", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: source.ActionCopy, refused: true},
		{name: "DelayLongerThanTTLUnderCapRetriesNowWithCopy", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m, MaxAttempts: 3}, caps: streamZset, want: source.ActionCopy, refused: true},
		{name: "DelayLongerThanTTLAtCapDeadLetters", outcome: after(time.Hour), attempt: 3, policy: source.Policy{Delay: zsetTTL1m, MaxAttempts: 3, DeadLetter: "dlq"}, caps: streamZset, want: source.ActionDeadLetter},
		{name: "DelayLongerThanTTLOnClaimingLeavesPending", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: claimZset, want: source.ActionLeave, delay: 30 * time.Second, refused: true},
		{name: "NoTTLKeepsAnyDelay", outcome: after(1000 * time.Hour), attempt: 1, policy: source.Policy{Delay: zsetNoTTL}, caps: streamZset, want: source.ActionPark, delay: 1000 * time.Hour},
		{name: "InProcessHasNoTTL", outcome: after(1000 * time.Hour), attempt: 1, policy: source.Policy{Delay: delayed.InProcess{}}, caps: source.Caps{RetryWithoutCap: source.ActionCopy}, want: source.ActionPark, delay: 1000 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := decide(tt.outcome, tt.attempt, tt.policy, tt.caps)
			if got.Action != tt.want || got.Delay != tt.delay {
				t.Fatalf("decide = %s (delay %s), want %s (delay %s); reason %q", got.Action, got.Delay, tt.want, tt.delay, got.Reason)
			}
			refused := strings.Contains(got.Reason, "exceeds the TTL")
			if refused != tt.refused {
				t.Fatalf("reason %q: refusal mentioned = %v, want %v", got.Reason, refused, tt.refused)
			}
		})
	}
}

var errBoomDelay = errorString("boom")

type errorString string

func (e errorString) Error() string { return string(e) }
