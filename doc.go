// Package settle consumes work from Redis (streams, claiming streams, reliable and plain
// lists, pub/sub channels and patterns) and, through its inbox package, from SQL table
// inboxes, so that every delivery ends in one explicit settlement: ack, drop, retry
// now, retry after a delay, or, once its attempts are spent, a dead letter.
//
// # Handlers and outcomes
//
// A [Handler] returns an error, and the error is the outcome: nil acks; [Drop],
// [Retry] and [RetryAfter] ask for those outcomes and survive %w wrapping; any other
// error (a panic, an undecodable payload) retries after the mount's [Backoff] and is kept
// for the dead letter. A handler that runs past the mount's [Timeout] is settled as a
// failure at once.
// [Typed] decodes msgpack (or JSON, or raw bytes: [WithCodec]) before calling a typed
// function.
//
// # Replies
//
// [Reply] is a typed handler that also returns a value: on success it is encoded with
// the mount's codec and written to the mount's [ReplyTo] destination ([Message.Reply]
// adds one, or several, from any handler). Where that destination shares the source's
// store (a stream of the same hash slot, a list beside a reliable list, another group
// or table of an inbox's database) the replies and the completion of the original are
// one atomic step; across stores, [ReplyVia] publishes them first and completes the
// original after (at least once).
//
// # Mounts and the App
//
// An [App] mounts handlers on sources such as [Stream], each with its own policy:
// [MaxAttempts], [DeadLetter], [Concurrency] (handlers running), [Prefetch] (deliveries
// read ahead), [DelayIn]. [App.Run] validates every
// mount, reporting every refusal at once, then consumes until its context is cancelled
// and shuts down gracefully.
//
// # Settlement per transport
//
// One engine decides every settlement; a transport only applies it, each write and the
// completion of its delivery in one atomic step (a Lua script with all its keys in one
// hash slot, or one SQL transaction):
//
//	source                Retry, no cap              Retry under MaxAttempts      dead letter (at the cap)
//	Stream                copy (retry count + 1),    the same                     XADD to the dead-letter
//	                      original acked                                          stream, original acked
//	ClaimingStream        left pending; claimed      the same (the attempt is     as Stream
//	                      back after minIdle         Redis's delivery counter)
//	ReliableList          item moved back to the     a copy (retry count + 1)     item moved to the
//	                      list as it is              moved back instead           dead-letter list
//	List                  lost, with a warning       copy pushed to the list      RPUSH to the dead list
//	PubSub, PubSubPattern lost, with a warning       copy published (OutRetry)    PUBLISH to the channel
//	inbox.Queue           lease cleared,             the same                     row moved to the dead
//	                      attempt + 1                                             group or table
//
// [RetryAfter] keeps its delay where [DelayIn] says: in the process by default (the
// original stays unsettled until the copy is written, so a crash loses nothing where
// the transport keeps pending entries), or in a delayed.DurableZset that survives
// restarts. A ClaimingStream without a durable set has no wait but minIdle; an inbox
// keeps every delay in its own retry_after column.
//
// At-least-once: Stream, ClaimingStream, ReliableList and the inbox. At-most-once: List
// and PubSub, whose pop or receive removes the message before it is handled.
//
// An attempt counts every delivery, the first included; where a transport can tell
// that a delivery never settled (a consumer that crashed), that delivery counts too,
// so a message that kills its consumer reaches the cap and the dead letter.
package settle
