// Package delayed names where a RetryAfter delay waits. A mount chooses one with
// settle.DelayIn; the default is InProcess.
package delayed

// Strategy is where a delay waits. It is sealed: the strategies are the types of this
// package.
type Strategy interface {
	// Durable reports whether the delay survives a restart of the process.
	Durable() bool
	strategy()
}

// InProcess keeps the delayed copy in the consuming process: when the delay has passed,
// the copy (retry count + 1) is written back to the source and the original is
// completed in the same atomic step. Until then the original stays unacknowledged, so a
// crash loses nothing where the transport keeps pending entries (streams, reliable
// lists); on a plain list or a channel a crash loses the delayed message. A graceful
// shutdown writes the waiting copies back at once, so they are redelivered early rather
// than lost. This is the default.
type InProcess struct{}

// Durable returns false.
func (InProcess) Durable() bool { return false }
func (InProcess) strategy()     {}
