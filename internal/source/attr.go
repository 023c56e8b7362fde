package source

import (
	"context"
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
