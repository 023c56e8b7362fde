package source

import (
	"context"
	"errors"
	"time"
)

// Log attribute keys, shared by the engine, every transport and the inbox: one spelling
// each, so that a log query by key finds every line.
const (
	AttrAction  = "action"
	AttrAttempt = "attempt"
	AttrDelay   = "delay"
	AttrError   = "error"
	AttrGroup   = "group"
	AttrKey     = "key"
	AttrMount   = "mount"
	AttrMsgID   = "msg_id"
	AttrMsgKey  = "msg_key"
	AttrOutcome = "outcome"
	AttrReason  = "reason"
)

// ReplicaWaiter is a transport whose settlements are Redis writes: it can wait for
// replicas to acknowledge them (settle.WaitReplicas). The engine wraps such a transport
// so that each Ack or Moves call waits after it writes; a transport without it refuses
// WaitReplicas at validation.
type ReplicaWaiter interface {
	// WaitReplicas returns how many replicas acknowledged every write made so far on
	// the transport's server, waiting at most timeout for n.
	WaitReplicas(ctx context.Context, n int, timeout time.Duration) (int, error)
	// ReplicaPerms checks that the client's user may run what WaitReplicas runs.
	ReplicaPerms(ctx context.Context) error
	// Replicas returns how many replicas the transport's primary reports connected.
	Replicas(ctx context.Context) (int, error)
}

// AttemptKeeper is a transport that records, with a delivery left where it is, the
// attempts spent on it: an Ordered retry runs a delivery again in place without the
// transport reading it again, and a transport that counts attempts by its reads (a
// stream's delivery counter) would otherwise count from its first read after a crash
// or a stop.
type AttemptKeeper interface {
	// KeepAttempt records d.Attempt as the attempts d's message has spent, before the
	// attempt runs. An error wrapping ErrTakenOver means d is no longer this
	// consumer's.
	KeepAttempt(ctx context.Context, d *Delivery) error
}

// ReadAhead is a transport that can have more than one read of new messages out at
// once, so that its server never waits on the engine between reads while work is
// there. Fetch stays the mount's one read of everything (redeliveries, takeovers, due
// delays, the blocking wait); the engine calls FetchAhead from other goroutines, only
// while Fetch's last read came back full, never blocking.
type ReadAhead interface {
	// FetchAhead returns up to max new deliveries without blocking: never a redelivery
	// nor one taken over, and nothing (nil, nil) while the transport must read
	// something else first (its own pending entries again, after a failed settlement
	// or a lost read). It is safe to call concurrently with Fetch, Ack, Moves and
	// itself.
	FetchAhead(ctx context.Context, max int) ([]*Delivery, error)
}

// KeyChecker is a transport that writes keys besides its source (a delay set, a
// dead-letter or reply destination): it can say which of them hold another type. Open
// refuses such a key; the engine asks again when a settlement fails with WRONGTYPE, so
// that its log names the key that changed type while the mount ran.
type KeyChecker interface {
	// CheckKeys returns an error naming each key the mount writes that exists and holds
	// another type, with the command that fails there; nil when none does.
	CheckKeys(ctx context.Context) error
}

// ErrKeptForRedo marks a settlement error whose transport kept the settlement and
// applies it again itself once it can (the inbox, once its database answers, its row
// still held): the engine does not write it again when the message comes back.
var ErrKeptForRedo = errors.New("kept, to be applied again")
