package delayed

import "time"

// DurableZset keeps RetryAfter delays in Redis, in the sorted set Key, so that they
// survive a restart of the process. Mount it on a stream, a list or a channel with
// settle.DelayIn(delayed.DurableZset{Key: "{refunds}:delayed"}).
//
// Parking a delay is one Lua script: the retry copy (retry count + 1, encoded by Go) goes
// into the set scored by its due time in milliseconds and the original is completed in
// the same step where the transport keeps one (a stream entry is acknowledged, a
// reliable list item leaves its processing list; a plain list's pop and a channel's
// receive already took theirs). "Now" is the Redis server's TIME, so the hosts' clocks
// need not agree (a test kit's fake clock replaces it in tests). Before each read, one
// Lua script moves the due members back, in bounded batches: into the stream with new
// ids, to the tail of the list, or published to the channel (a pattern mount's
// OutRetry); a member moves exactly once however many consumers sweep at the same time.
// A read blocks no longer than the time until the earliest due member, so a delay comes
// back within milliseconds of its due time, not a block interval late.
//
// A set serves one stream, list or channel: give each its own Key. On Redis Cluster a
// stream or list and its set (and a stream's or reliable list's dead-letter key) must
// hash to one slot: give them one {hash tag}, e.g. "{refunds}:in", "{refunds}:delayed"
// and "{refunds}:dlq"; the App refuses to start when they do not. A channel is not a
// key, so a channel's set may live in any slot.
type DurableZset struct {
	// Key is the sorted set's key. Required.
	Key string
	// TTL, when positive, keeps the set at least TTL after the last delay was parked in
	// it and lets it expire then, so a set abandoned by every consumer does not live
	// forever. It must exceed the longest delay: a RetryAfter longer than TTL is refused
	// (logged, and the delivery is retried at once instead), never parked to be lost. A
	// write never brings the set's expiry closer: when writers of one set (mounts, a
	// producer's delayed publish) give it different TTLs, the later expiry wins, and a
	// writer without TTL leaves the set without expiry. Defaults to 0: the set never
	// expires.
	TTL time.Duration
}

// Durable returns true.
func (DurableZset) Durable() bool { return true }
func (DurableZset) strategy()     {}
