package source

import "context"

// Event is what a transport reports beside settlements, through Env.Event: claims,
// recoveries, sweeps. The engine names the mount, key and group.
type Event struct {
	// Count is how many messages it concerns.
	Count int
	// Err is the error of a failed step, if any.
	Err error
	// Kind is "claim", "recovery", "lease" or "sweep" (settle.EventKind's values).
	Kind string
}

// The event kinds transports report.
const (
	EventClaim    = "claim"
	EventLease    = "lease"
	EventRecovery = "recovery"
	EventSweep    = "sweep"
)

// Emit reports e through env's Event hook, when the App set one.
func (env Env) Emit(ctx context.Context, e Event) {
	if env.Event != nil {
		env.Event(ctx, e)
	}
}
