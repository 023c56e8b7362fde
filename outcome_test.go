package settle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// The transports' capabilities, as DESIGN.md's Redis tables describe them.
var (
	capsStream          = source.Caps{RetryWithoutCap: source.ActionCopy}
	capsStreamZset      = source.Caps{Parks: true, RetryWithoutCap: source.ActionCopy}
	capsClaiming        = source.Caps{DeliveryCounter: true, MinIdle: 30 * time.Second, RetryWithoutCap: source.ActionLeave}
	capsClaimingZset    = source.Caps{DeliveryCounter: true, MinIdle: 30 * time.Second, Parks: true, RetryWithoutCap: source.ActionLeave}
	capsReliableList    = source.Caps{RetryWithoutCap: source.ActionPutBack}
	capsTable           = source.Caps{Parks: true, Releases: true, RetriesInPlace: true, RetryWithoutCap: source.ActionPutBack}
	capsList            = source.Caps{RetryWithoutCap: source.ActionLose}
	capsPubSub          = source.Caps{RetryWithoutCap: source.ActionLose}
	policyNone          = source.Policy{}
	policyCap3          = source.Policy{MaxAttempts: 3}
	policyCap3DLQ       = source.Policy{MaxAttempts: 3, DeadLetter: "dlq"}
	policyDLQ           = source.Policy{DeadLetter: "dlq"}
	policyOrdered       = source.Policy{Ordered: true}
	policyOrderedCap3   = source.Policy{Ordered: true, MaxAttempts: 3}
	policyOrderedCap3DL = source.Policy{Ordered: true, MaxAttempts: 3, DeadLetter: "dlq"}
	errBoom             = errors.New("boom")
	outcomeAck          = Outcome{Kind: OutcomeAck}
	outcomeDrop         = Outcome{Kind: OutcomeDrop, Err: errBoom}
	outcomeRetry        = Outcome{Kind: OutcomeRetry, Err: errBoom}
	outcomeRetryAfter5s = Outcome{Kind: OutcomeRetryAfter, Delay: 5 * time.Second, Err: errBoom}
	outcomeRetryAfter1h = Outcome{Kind: OutcomeRetryAfter, Delay: time.Hour, Err: errBoom}
)

func TestDecide(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		outcome Outcome
		attempt int
		policy  source.Policy
		caps    source.Caps
		want    Action
		delay   time.Duration
		inPlace bool
	}{
		// Ack completes on every transport, whatever the policy.
		{name: "StreamAckAcks", outcome: outcomeAck, attempt: 1, policy: policyNone, caps: capsStream, want: ActionAck},
		{name: "ClaimingAckAcks", outcome: outcomeAck, attempt: 1, policy: policyNone, caps: capsClaiming, want: ActionAck},
		{name: "ReliableListAckAcks", outcome: outcomeAck, attempt: 1, policy: policyNone, caps: capsReliableList, want: ActionAck},
		{name: "ListAckAcks", outcome: outcomeAck, attempt: 1, policy: policyNone, caps: capsList, want: ActionAck},
		{name: "PubSubAckAcks", outcome: outcomeAck, attempt: 1, policy: policyNone, caps: capsPubSub, want: ActionAck},
		{name: "AckAtCapAcks", outcome: outcomeAck, attempt: 3, policy: policyCap3DLQ, caps: capsStream, want: ActionAck},

		// Drop completes and never dead-letters, not even at the cap with a destination.
		{name: "DropWithoutPolicyDrops", outcome: outcomeDrop, attempt: 1, policy: policyNone, caps: capsStream, want: ActionDrop},
		{name: "DropNeverDeadLetters", outcome: outcomeDrop, attempt: 3, policy: policyCap3DLQ, caps: capsStream, want: ActionDrop},
		{name: "DropUnderCapNeverDeadLetters", outcome: outcomeDrop, attempt: 1, policy: policyCap3DLQ, caps: capsStream, want: ActionDrop},
		{name: "DropWithDeadLetterWithoutCapNeverDeadLetters", outcome: outcomeDrop, attempt: 1, policy: policyDLQ, caps: capsStream, want: ActionDrop},
		{name: "ClaimingDropNeverDeadLetters", outcome: outcomeDrop, attempt: 3, policy: policyCap3DLQ, caps: capsClaiming, want: ActionDrop},
		{name: "ReliableListDropNeverDeadLetters", outcome: outcomeDrop, attempt: 3, policy: policyCap3DLQ, caps: capsReliableList, want: ActionDrop},
		{name: "ListDropNeverDeadLetters", outcome: outcomeDrop, attempt: 3, policy: policyCap3DLQ, caps: capsList, want: ActionDrop},
		{name: "PubSubDropNeverDeadLetters", outcome: outcomeDrop, attempt: 3, policy: policyCap3DLQ, caps: capsPubSub, want: ActionDrop},

		// Retry with no cap, per transport (DESIGN's first Redis table).
		{name: "StreamRetryWithoutCapCopies", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsStream, want: ActionCopy},
		{name: "StreamRetryWithoutCapCopiesAtAnyAttempt", outcome: outcomeRetry, attempt: 50, policy: policyNone, caps: capsStream, want: ActionCopy},
		{name: "ClaimingRetryLeavesPending", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsClaiming, want: ActionLeave, delay: 30 * time.Second},
		{name: "ReliableListRetryWithoutCapPutsBack", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsReliableList, want: ActionPutBack},
		{name: "ListRetryWithoutCapLoses", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsList, want: ActionLose},
		{name: "PubSubRetryWithoutCapLoses", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsPubSub, want: ActionLose},

		// With a cap, every subscription but the claiming stream retries by writing a copy.
		{name: "StreamRetryUnderCapCopies", outcome: outcomeRetry, attempt: 1, policy: policyCap3DLQ, caps: capsStream, want: ActionCopy},
		{name: "ReliableListRetryUnderCapCopies", outcome: outcomeRetry, attempt: 1, policy: policyCap3DLQ, caps: capsReliableList, want: ActionCopy},
		{name: "ListRetryUnderCapCopies", outcome: outcomeRetry, attempt: 1, policy: policyCap3DLQ, caps: capsList, want: ActionCopy},
		{name: "PubSubRetryUnderCapCopies", outcome: outcomeRetry, attempt: 2, policy: policyCap3DLQ, caps: capsPubSub, want: ActionCopy},
		{name: "ListRetryUnderCapWithoutDeadLetterCopies", outcome: outcomeRetry, attempt: 1, policy: policyCap3, caps: capsList, want: ActionCopy},
		{name: "TableRetryUnderCapPutsBackInPlaceNotACopy", outcome: outcomeRetry, attempt: 1, policy: policyCap3DLQ, caps: capsTable, want: ActionPutBack},
		{name: "TableRetryUnderCapAtTheCapDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsTable, want: ActionDeadLetter},
		{name: "ClaimingRetryUnderCapLeavesPending", outcome: outcomeRetry, attempt: 2, policy: policyCap3DLQ, caps: capsClaiming, want: ActionLeave, delay: 30 * time.Second},

		// The n-th failed delivery is not retried: dead letter, or reject with no destination.
		{name: "NthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsStream, want: ActionDeadLetter},
		{name: "DeliveryPastCapDeadLetters", outcome: outcomeRetry, attempt: 7, policy: policyCap3DLQ, caps: capsStream, want: ActionDeadLetter},
		{name: "CapOfOneDeadLettersFirstFailure", outcome: outcomeRetry, attempt: 1, policy: source.Policy{MaxAttempts: 1, DeadLetter: "dlq"}, caps: capsStream, want: ActionDeadLetter},
		{name: "ClaimingNthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsClaiming, want: ActionDeadLetter},
		{name: "ReliableListNthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsReliableList, want: ActionDeadLetter},
		{name: "ListNthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsList, want: ActionDeadLetter},
		{name: "PubSubNthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsPubSub, want: ActionDeadLetter},
		{name: "CapWithoutDeadLetterRejects", outcome: outcomeRetry, attempt: 3, policy: policyCap3, caps: capsStream, want: ActionReject},
		{name: "ClaimingCapWithoutDeadLetterRejects", outcome: outcomeRetry, attempt: 3, policy: policyCap3, caps: capsClaiming, want: ActionReject},
		{name: "ListCapWithoutDeadLetterRejects", outcome: outcomeRetry, attempt: 3, policy: policyCap3, caps: capsList, want: ActionReject},
		{name: "CapWithoutDeadLetterRetriesUnderCap", outcome: outcomeRetry, attempt: 2, policy: policyCap3, caps: capsStream, want: ActionCopy},

		// A destination without a cap dead-letters at the first retry.
		{name: "DeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: policyDLQ, caps: capsStream, want: ActionDeadLetter},
		{name: "DeadLetterWithoutCapAtLaterAttempt", outcome: outcomeRetry, attempt: 4, policy: policyDLQ, caps: capsStream, want: ActionDeadLetter},
		{name: "ClaimingDeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: policyDLQ, caps: capsClaiming, want: ActionDeadLetter},
		{name: "ReliableListDeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: policyDLQ, caps: capsReliableList, want: ActionDeadLetter},
		{name: "ListDeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: policyDLQ, caps: capsList, want: ActionDeadLetter},
		{name: "PubSubDeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: policyDLQ, caps: capsPubSub, want: ActionDeadLetter},
		{name: "DeadLetterWithoutCapAtFirstDelayedRetry", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyDLQ, caps: capsStream, want: ActionDeadLetter},

		// RetryAfter: in-process or durable parking keeps the delay as asked.
		{name: "RetryAfterParksCopy", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsStream, want: ActionPark, delay: 5 * time.Second},
		{name: "RetryAfterUnderCapParksCopy", outcome: outcomeRetryAfter5s, attempt: 2, policy: policyCap3DLQ, caps: capsStream, want: ActionPark, delay: 5 * time.Second},
		{name: "StreamWithDurableZsetParks", outcome: outcomeRetryAfter1h, attempt: 1, policy: policyNone, caps: capsStreamZset, want: ActionPark, delay: time.Hour},
		{name: "ReliableListRetryAfterParksCopy", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsReliableList, want: ActionPark, delay: 5 * time.Second},
		{name: "ListRetryAfterParksCopy", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsList, want: ActionPark, delay: 5 * time.Second},
		{name: "PubSubRetryAfterParksCopy", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsPubSub, want: ActionPark, delay: 5 * time.Second},
		{name: "RetryAfterWithoutDelayRetriesNow", outcome: Outcome{Kind: OutcomeRetryAfter, Err: errBoom}, attempt: 1, policy: policyNone, caps: capsStream, want: ActionCopy},

		// A claiming stream without a zset has only min-idle to wait with.
		{name: "ClaimingRetryAfterRoundsToMinIdle", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsClaiming, want: ActionLeave, delay: 30 * time.Second},
		{name: "ClaimingRetryAfterCutToMinIdle", outcome: outcomeRetryAfter1h, attempt: 1, policy: policyCap3DLQ, caps: capsClaiming, want: ActionLeave, delay: 30 * time.Second},
		{name: "ClaimingWithDurableZsetParks", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyNone, caps: capsClaimingZset, want: ActionPark, delay: 5 * time.Second},
		{name: "ClaimingWithDurableZsetParksLongDelay", outcome: outcomeRetryAfter1h, attempt: 2, policy: policyCap3DLQ, caps: capsClaimingZset, want: ActionPark, delay: time.Hour},
		{name: "ClaimingWithDurableZsetRetryLeavesPending", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsClaimingZset, want: ActionLeave, delay: 30 * time.Second},

		// A delayed retry counts like an immediate one.
		{name: "DelayedRetryCountsLikeImmediate", outcome: outcomeRetryAfter5s, attempt: 3, policy: policyCap3DLQ, caps: capsStream, want: ActionDeadLetter},
		{name: "DelayedRetryAtCapWithoutDeadLetterRejects", outcome: outcomeRetryAfter5s, attempt: 3, policy: policyCap3, caps: capsStream, want: ActionReject},
		{name: "ClaimingDelayedRetryCountsLikeImmediate", outcome: outcomeRetryAfter5s, attempt: 3, policy: policyCap3DLQ, caps: capsClaiming, want: ActionDeadLetter},
		{name: "DurableZsetDelayedRetryCountsLikeImmediate", outcome: outcomeRetryAfter1h, attempt: 3, policy: policyCap3DLQ, caps: capsStreamZset, want: ActionDeadLetter},
		{name: "ListDelayedRetryCountsLikeImmediate", outcome: outcomeRetryAfter5s, attempt: 3, policy: policyCap3DLQ, caps: capsList, want: ActionDeadLetter},

		// Ordered (a Stream, a PartitionedStream): a retry that would write a copy runs
		// again in place, after the copy's delay, its entry left pending; the final
		// settlements are as without Ordered.
		{name: "OrderedAckAcks", outcome: outcomeAck, attempt: 1, policy: policyOrderedCap3DL, caps: capsStream, want: ActionAck},
		{name: "OrderedDropDrops", outcome: outcomeDrop, attempt: 1, policy: policyOrderedCap3DL, caps: capsStream, want: ActionDrop},
		{name: "OrderedRetryRunsAgainInPlaceNotACopy", outcome: outcomeRetry, attempt: 1, policy: policyOrderedCap3DL, caps: capsStream, want: ActionLeave, inPlace: true},
		{name: "OrderedRetryWithoutCapRunsAgainInPlace", outcome: outcomeRetry, attempt: 50, policy: policyOrdered, caps: capsStream, want: ActionLeave, inPlace: true},
		{name: "OrderedBackoffWaitsInPlace", outcome: Outcome{Kind: OutcomeRetry, Delay: 2 * time.Second, Err: errBoom}, attempt: 2, policy: policyOrderedCap3DL, caps: capsStream, want: ActionLeave, delay: 2 * time.Second, inPlace: true},
		{name: "OrderedRetryAfterWaitsInPlaceNotParked", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyOrdered, caps: capsStream, want: ActionLeave, delay: 5 * time.Second, inPlace: true},
		{name: "OrderedRetryAfterWithDurableZsetWaitsInPlace", outcome: outcomeRetryAfter1h, attempt: 1, policy: policyOrderedCap3DL, caps: capsStreamZset, want: ActionLeave, delay: time.Hour, inPlace: true},
		{name: "OrderedNthFailedDeliveryDeadLetters", outcome: outcomeRetry, attempt: 3, policy: policyOrderedCap3DL, caps: capsStream, want: ActionDeadLetter},
		{name: "OrderedDelayedRetryAtCapDeadLetters", outcome: outcomeRetryAfter5s, attempt: 3, policy: policyOrderedCap3DL, caps: capsStream, want: ActionDeadLetter},
		{name: "OrderedCapWithoutDeadLetterRejects", outcome: outcomeRetry, attempt: 3, policy: policyOrderedCap3, caps: capsStream, want: ActionReject},
		{name: "OrderedDeadLetterWithoutCapAtFirstRetry", outcome: outcomeRetry, attempt: 1, policy: source.Policy{Ordered: true, DeadLetter: "dlq"}, caps: capsStream, want: ActionDeadLetter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := decide(tt.outcome, tt.attempt, tt.policy, tt.caps)
			if got.Action != tt.want {
				t.Fatalf("got action %s, want %s (settlement %+v)", got.Action, tt.want, got)
			}
			if got.Delay != tt.delay {
				t.Fatalf("got delay %s, want %s", got.Delay, tt.delay)
			}
			if got.InPlace != tt.inPlace {
				t.Fatalf("got in place %v, want %v (settlement %+v)", got.InPlace, tt.inPlace, got)
			}
			if got.Action != ActionAck && got.Reason == "" {
				t.Fatalf("got no reason for %s; every settlement but ack says why", got.Action)
			}
		})
	}
}

func TestDecideReasonNamesTheCap(t *testing.T) {
	t.Parallel()

	got := decide(outcomeRetry, 3, policyCap3DLQ, capsStream)
	if want := "max attempts reached (3 of 3)"; got.Reason != want {
		t.Fatalf("got reason %q, want %q", got.Reason, want)
	}
	got = decide(outcomeRetry, 3, policyCap3, capsStream)
	if want := "max attempts reached (3 of 3), no dead letter declared"; got.Reason != want {
		t.Fatalf("got reason %q, want %q", got.Reason, want)
	}
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()

	plain := errors.New("plain")
	tests := []struct {
		name    string
		err     error
		kind    OutcomeKind
		delay   time.Duration
		keepErr bool
	}{
		{name: "NilIsAck", err: nil, kind: OutcomeAck},
		{name: "PlainErrorIsRetry", err: plain, kind: OutcomeRetry, keepErr: true},
		{name: "DropIsDrop", err: Drop(plain), kind: OutcomeDrop, keepErr: true},
		{name: "DropOfNilIsDrop", err: Drop(nil), kind: OutcomeDrop, keepErr: true},
		{name: "RetryIsRetry", err: Retry(plain), kind: OutcomeRetry, keepErr: true},
		{name: "RetryAfterIsRetryAfter", err: RetryAfter(time.Minute, plain), kind: OutcomeRetryAfter, delay: time.Minute, keepErr: true},
		{name: "RetryAfterZeroIsRetry", err: RetryAfter(0, plain), kind: OutcomeRetry, keepErr: true},
		{name: "RetryAfterNegativeIsRetry", err: RetryAfter(-time.Second, plain), kind: OutcomeRetry, keepErr: true},
		{name: "LiteralRetryAfterZeroIsRetry", err: &OutcomeError{Kind: OutcomeRetryAfter}, kind: OutcomeRetry, keepErr: true},
		{name: "DropThroughWrapping", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", fmt.Errorf("c: %w", Drop(plain)))), kind: OutcomeDrop, keepErr: true},
		{name: "RetryThroughWrapping", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", Retry(plain))), kind: OutcomeRetry, keepErr: true},
		{name: "RetryAfterThroughWrapping", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", fmt.Errorf("c: %w", RetryAfter(time.Second, plain)))), kind: OutcomeRetryAfter, delay: time.Second, keepErr: true},
		{name: "DropThroughJoin", err: errors.Join(plain, fmt.Errorf("x: %w", Drop(nil))), kind: OutcomeDrop, keepErr: true},
		{name: "RetryAfterThroughJoinInWrapping", err: fmt.Errorf("outer: %w", errors.Join(errors.New("other"), RetryAfter(2*time.Second, nil))), kind: OutcomeRetryAfter, delay: 2 * time.Second, keepErr: true},
		{name: "PanicErrorIsRetry", err: &PanicError{Value: "boom"}, kind: OutcomeRetry, keepErr: true},
		{name: "DecodeErrorIsRetry", err: &DecodeError{Codec: "msgpack", Err: plain}, kind: OutcomeRetry, keepErr: true},
		{name: "WrappedDecodeErrorIsRetry", err: fmt.Errorf("handler: %w", &DecodeError{Codec: "json", Err: plain}), kind: OutcomeRetry, keepErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := OutcomeOf(tt.err)
			if got.Kind != tt.kind {
				t.Fatalf("got kind %q, want %q", got.Kind, tt.kind)
			}
			if got.Delay != tt.delay {
				t.Fatalf("got delay %s, want %s", got.Delay, tt.delay)
			}
			if tt.keepErr && got.Err != tt.err {
				t.Fatalf("got err %v, want the handler's error %v kept", got.Err, tt.err)
			}
			if !tt.keepErr && got.Err != nil {
				t.Fatalf("got err %v, want nil", got.Err)
			}
		})
	}
}

func TestOutcomeErrorIsMatchesByKind(t *testing.T) {
	t.Parallel()

	err := fmt.Errorf("deep: %w", Drop(errors.New("bad input")))
	if !errors.Is(err, &OutcomeError{Kind: OutcomeDrop}) {
		t.Fatalf("errors.Is(%v, Drop) = false, want true", err)
	}
	if errors.Is(err, &OutcomeError{Kind: OutcomeRetry}) {
		t.Fatalf("errors.Is(%v, Retry) = true, want false", err)
	}
	if !errors.Is(RetryAfter(time.Hour, nil), &OutcomeError{Kind: OutcomeRetryAfter, Delay: time.Second}) {
		t.Fatal("RetryAfter(1h) does not match a RetryAfter of another delay; Is must match by kind only")
	}
	if errors.Is(err, errors.New("settle: drop")) {
		t.Fatal("an OutcomeError matched a plain error")
	}
}

func TestOutcomeErrorKeepsCause(t *testing.T) {
	t.Parallel()

	cause := errors.New("card declined")
	err := fmt.Errorf("charge: %w", RetryAfter(90*time.Second, cause))
	if !errors.Is(err, cause) {
		t.Fatalf("errors.Is(%v, cause) = false: the cause must stay reachable", err)
	}
	var oe *OutcomeError
	if !errors.As(err, &oe) || oe.Delay != 90*time.Second {
		t.Fatalf("errors.As found %+v, want a RetryAfter of 90s", oe)
	}
	if got, want := err.Error(), "charge: settle: retry_after 1m30s: card declined"; got != want {
		t.Fatalf("got message %q, want %q", got, want)
	}
	if got, want := Drop(nil).Error(), "settle: drop"; got != want {
		t.Fatalf("got message %q, want %q", got, want)
	}
}

func BenchmarkDecide(b *testing.B) {
	cases := []struct {
		name    string
		outcome Outcome
		attempt int
		policy  source.Policy
		caps    source.Caps
	}{
		{name: "Ack", outcome: outcomeAck, attempt: 1, policy: policyCap3DLQ, caps: capsStream},
		{name: "RetryCopy", outcome: outcomeRetry, attempt: 1, policy: policyCap3DLQ, caps: capsStream},
		{name: "RetryAfterPark", outcome: outcomeRetryAfter5s, attempt: 1, policy: policyCap3DLQ, caps: capsStream},
		{name: "ClaimingLeave", outcome: outcomeRetry, attempt: 1, policy: policyNone, caps: capsClaiming},
		{name: "CapDeadLetter", outcome: outcomeRetry, attempt: 3, policy: policyCap3DLQ, caps: capsStream},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = decide(c.outcome, c.attempt, c.policy, c.caps)
			}
		})
	}
}

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
		want    Action
		delay   time.Duration
		refused bool
		inPlace bool
	}{
		{name: "DelayWithinTTLParks", outcome: after(30 * time.Second), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: ActionPark, delay: 30 * time.Second},
		{name: "DelayEqualToTTLParks", outcome: after(time.Minute), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: ActionPark, delay: time.Minute},
		{name: "DelayLongerThanTTLRetriesNowWithCopy", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: streamZset, want: ActionCopy, refused: true},
		{name: "DelayLongerThanTTLUnderCapRetriesNowWithCopy", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m, MaxAttempts: 3}, caps: streamZset, want: ActionCopy, refused: true},
		{name: "DelayLongerThanTTLAtCapDeadLetters", outcome: after(time.Hour), attempt: 3, policy: source.Policy{Delay: zsetTTL1m, MaxAttempts: 3, DeadLetter: "dlq"}, caps: streamZset, want: ActionDeadLetter},
		{name: "DelayLongerThanTTLOnClaimingLeavesPending", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m}, caps: claimZset, want: ActionLeave, delay: 30 * time.Second, refused: true},
		{name: "NoTTLKeepsAnyDelay", outcome: after(1000 * time.Hour), attempt: 1, policy: source.Policy{Delay: zsetNoTTL}, caps: streamZset, want: ActionPark, delay: 1000 * time.Hour},
		{name: "OrderedDelayLongerThanTTLRetriesNowInPlace", outcome: after(time.Hour), attempt: 1, policy: source.Policy{Delay: zsetTTL1m, Ordered: true}, caps: streamZset, want: ActionLeave, refused: true, inPlace: true},
		{name: "InProcessHasNoTTL", outcome: after(1000 * time.Hour), attempt: 1, policy: source.Policy{Delay: delayed.InProcess{}}, caps: source.Caps{RetryWithoutCap: source.ActionCopy}, want: ActionPark, delay: 1000 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := decide(tt.outcome, tt.attempt, tt.policy, tt.caps)
			if got.Action != tt.want || got.Delay != tt.delay || got.InPlace != tt.inPlace {
				t.Fatalf("decide = %s (delay %s, in place %v), want %s (delay %s, in place %v); reason %q", got.Action, got.Delay, got.InPlace, tt.want, tt.delay, tt.inPlace, got.Reason)
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

// settle.Action and the seam's source.Action are one set of values: the engine converts
// between them, so each must name the same action.
func TestActionValuesMatchTheSeams(t *testing.T) {
	t.Parallel()
	want := []string{"ack", "drop", "leave", "put_back", "copy", "park", "dead_letter", "reject", "lose"}
	for i, name := range want {
		a := Action(i + 1)
		if a.String() != name || source.Action(a).String() != name {
			t.Errorf("Action(%d) is %q, source.Action(%d) %q; want %q", i+1, a, i+1, source.Action(a), name)
		}
	}
	for _, c := range []struct {
		root Action
		seam source.Action
	}{{ActionAck, source.ActionAck}, {ActionDrop, source.ActionDrop}, {ActionLeave, source.ActionLeave}, {ActionPutBack, source.ActionPutBack}, {ActionCopy, source.ActionCopy}, {ActionPark, source.ActionPark}, {ActionDeadLetter, source.ActionDeadLetter}, {ActionReject, source.ActionReject}, {ActionLose, source.ActionLose}, {ActionReply, source.ActionReply}} {
		if uint8(c.root) != uint8(c.seam) {
			t.Errorf("%s is %d in settle, %d in the seam", c.root, c.root, c.seam)
		}
	}
}
