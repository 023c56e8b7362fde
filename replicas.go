package settle

import (
	"context"
	"fmt"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// WaitReplicas makes a Redis mount's settlements wait until n replicas have
// acknowledged them (Redis's WAIT, at most timeout) before they count as applied: a
// settlement the primary wrote but fewer replicas acknowledged in time is reported failed
// (Settled.Err), so that what OnSettled reports applied survives a failover to one of
// those replicas. It narrows what a failover undoes; it does not make replication
// synchronous (RELIABILITY.md §6 has the measured figures). Each Ack or Moves call of the mount then
// costs one more round trip, and one more while a replica lags. Refused on a List or
// PubSub mount (their settlements write nothing) and on a SQL inbox.
func WaitReplicas(n int, timeout time.Duration) MountOption {
	return mountOptionFunc(func(c *mountConfig) {
		c.replicas = replicaWait{n: n, timeout: timeout, set: true}
	})
}

// replicaWait is a mount's WaitReplicas.
type replicaWait struct {
	n       int
	timeout time.Duration
	set     bool
}

// problems returns the refusals of w for a mount whose transport is t.
func (w replicaWait) problems(t source.Transport) []string {
	if !w.set {
		return nil
	}
	var ps []string
	if w.n < 1 {
		ps = append(ps, fmt.Sprintf("WaitReplicas(%d, …): wait for at least 1 replica", w.n))
	}
	if w.timeout < time.Millisecond {
		ps = append(ps, fmt.Sprintf("WaitReplicas(…, %s): the timeout must be at least 1ms (WAIT 0 blocks until the replicas answer)", w.timeout))
	}
	if _, ok := t.(replicaTransport); !ok { // the engine wraps a transport that can wait
		ps = append(ps, fmt.Sprintf("WaitReplicas: only a stream or reliable list mount's settlements are Redis writes to wait for, not a %s source's", t.Info().Kind))
	}
	return ps
}

// replicaTransport applies a transport's settlements, then waits for replicas.
type replicaTransport struct {
	source.Transport
	w replicaWait
}

// Open checks the permissions of the wait (its marker's SET and WAIT), as the transport
// checks its own, then opens the transport: first, since a transport that opened has
// started what only Close stops.
func (t replicaTransport) Open(ctx context.Context) error {
	if err := t.Transport.(source.ReplicaWaiter).ReplicaPerms(ctx); err != nil {
		return err
	}
	return t.Transport.Open(ctx)
}

// Ack acks ds, then waits for the replicas.
func (t replicaTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	if err := t.Transport.Ack(ctx, ds); err != nil {
		return err // what the ack applied is not waited for: it is reported failed anyway
	}
	return t.wait(ctx)
}

// Moves applies ms, then waits for the replicas; a shortfall fails every move that
// applied.
func (t replicaTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := t.Transport.Moves(ctx, ms)
	applied := false
	for _, err := range errs {
		applied = applied || err == nil
	}
	if !applied {
		return errs
	}
	if err := t.wait(ctx); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	return errs
}

func (t replicaTransport) wait(ctx context.Context) error {
	got, err := t.Transport.(source.ReplicaWaiter).WaitReplicas(ctx, t.w.n, t.w.timeout)
	if err != nil {
		return fmt.Errorf("settlement written on the primary; waiting for %d replicas: %w", t.w.n, err)
	}
	if got < t.w.n {
		return fmt.Errorf("settlement written on the primary but acknowledged by %d of %d replicas within %s", got, t.w.n, t.w.timeout)
	}
	return nil
}
