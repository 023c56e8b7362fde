package source

import "context"

// Move is one retry copy or dead letter of a Mover's batch.
type Move struct {
	// Delivery is the delivery the move completes.
	Delivery *Delivery
	// DeadLetter is the dead-letter destination; empty for a retry copy (written where
	// Copy writes it).
	DeadLetter string
	// Headers are the written message's headers.
	Headers map[string]string
}

// Mover is a transport that writes many retry copies and dead letters in one call,
// each as Copy or DeadLetter would write it: its write and the completion of its
// delivery in one atomic step, fenced and failing on its own. The engine queues the
// moves of a mount's handlers and hands them over in batches, so that a handler does
// not wait for its move's round trip; a transport without it gets Copy and DeadLetter
// calls instead.
//
// Moves returns each move's error, in order (nil: applied), and returns only once every
// move is written or has failed: until then each delivery is still in flight (a
// transport must not read it again).
type Mover interface {
	Moves(ctx context.Context, ms []Move) []error
}
