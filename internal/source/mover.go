package source

import "context"

// Move is one retry copy, dead letter, put-back or left-pending retry of a Mover's
// batch.
type Move struct {
	// Delivery is the delivery the move completes.
	Delivery *Delivery
	// DeadLetter is the dead-letter destination; empty for a retry copy (written where
	// Copy writes it).
	DeadLetter string
	// Headers are the written message's headers.
	Headers map[string]string
	// PutBack asks for what PutBacker.PutBack does (the engine sends it only to a
	// transport that is a PutBacker): the delivery goes back, as it is, to where it was
	// read from. DeadLetter and Headers are unused.
	PutBack bool
	// Leave asks for what Leaver.Leave does (the engine sends it only to a transport that
	// is a Leaver): the delivery stays pending where it is, to come back once
	// Caps.MinIdle has passed. DeadLetter and Headers are unused.
	Leave bool
}

// Mover is a transport that writes many retry copies and dead letters in one call
// (and, if it is a PutBacker or a Leaver, puts back or leaves pending many retries),
// each as Copy, DeadLetter, PutBack or Leave would: its write and the completion of its delivery in one atomic step, fenced
// and failing on its own. The engine queues the moves of a mount's handlers and hands
// them over in batches, so that a handler does not wait for its move's round trip; a
// transport without it gets Copy, DeadLetter, PutBack and Leave calls instead.
//
// Moves returns each move's error, in order (nil: applied), and returns only once every
// move is written or has failed: until then each delivery is still in flight (a
// transport must not read it again).
type Mover interface {
	Moves(ctx context.Context, ms []Move) []error
}
