package delayed

import "time"

// DurableZset keeps RetryAfter delays in Redis, in the sorted set Key, so that they
// survive a restart of the process. Mount it on a stream with
// settle.DelayIn(delayed.DurableZset{Key: "{refunds}:delayed"}).
//
// Parking a delay is one Lua script: the retry copy (retry count + 1, encoded by Go) goes
// into the set scored by its due time in milliseconds and the original entry is
// acknowledged. "Now" is the Redis server's TIME, so the hosts' clocks need not agree (a
// test kit's fake clock replaces it in tests). Before each read, one Lua script moves
// the due members back into the stream with new ids, in bounded batches; a member moves
// exactly once however many consumers sweep at the same time. A read blocks no longer
// than the time until the earliest due member, so a delay comes back within
// milliseconds of its due time, not a block interval late.
//
// A set serves one stream: give each stream its own Key. On Redis Cluster the stream,
// its set and its dead-letter stream must hash to one slot: give them one {hash tag},
// e.g. "{refunds}:in", "{refunds}:delayed" and "{refunds}:dlq"; the App refuses to start
// when they do not.
type DurableZset struct {
	// Key is the sorted set's key. Required.
	Key string
	// TTL, when positive, makes the set expire TTL after the last delay was parked in it,
	// so a set abandoned by every consumer does not live forever. It must exceed the
	// longest delay: a RetryAfter longer than TTL is refused (logged, and the delivery is
	// retried at once instead), never parked to be lost. Defaults to 0: the set never
	// expires.
	TTL time.Duration
}

// Durable returns true.
func (DurableZset) Durable() bool { return true }
func (DurableZset) strategy()     {}
