package settle

import (
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/publish"
)

// PublishOption configures one publish call, of a Publisher (streams, lists, channels)
// or of an inbox (inbox.Inbox.Publish and its family). An option that does not apply
// to what is published (MaxLen on a channel, say) is refused by the call with an error
// naming it, never ignored.
type PublishOption func(*publish.Config)

// Header sets one header of the published message. Names starting with HeaderPrefix,
// the payload field's name and the empty name are refused by the call. Every publish
// takes it; an inbox needs a Table.Headers column.
func Header(name, value string) PublishOption {
	return func(c *publish.Config) {
		c.Give("Header")
		if c.Headers == nil {
			c.Headers = make(map[string]string, 2)
		}
		c.Headers[name] = value
	}
}

// Headers sets every header of h on the published message (h is not kept); see Header.
func Headers(h map[string]string) PublishOption {
	return func(c *publish.Config) {
		if len(h) == 0 {
			return
		}
		c.Give("Header")
		if c.Headers == nil {
			c.Headers = make(map[string]string, len(h))
		}
		for k, v := range h {
			c.Headers[k] = v
		}
	}
}

// After delays the message's first delivery by d. On an inbox the row is inserted
// with retry_after = the database's now + d (a Table.RetryAfter column is needed). On
// Redis the message waits in the durable delay set of the consumer's mount, which the
// call must name with DelaySet: it is scored by the Redis server's TIME + d inside one
// script (the publisher's clock does not matter), and the mount's sweep delivers it
// exactly as it delivers a parked retry, as a first delivery (retry count 0), within the
// same lateness: a consumer that blocks in a read sweeps when the read ends, at most the
// mount's Block after the message is due. A negative d is refused; 0 is due at once.
// Not with At.
func After(d time.Duration) PublishOption {
	return func(c *publish.Config) {
		c.Give("After")
		c.After, c.AfterSet = d, true
	}
}

// At delays the message's first delivery until t, as After does; a time already
// passed is due at once. Not with After.
func At(t time.Time) PublishOption {
	return func(c *publish.Config) {
		c.Give("At")
		c.At = t
	}
}

// DelaySet names the durable delay set a delayed publish (After, At) to Redis waits
// in: the one the consumer's mount declares with DelayIn, whose sweep delivers it. It
// must share a hash slot with the stream or list published to ("{orders}:in" and
// "{orders}:delayed"); the set's TTL is refreshed as a parked retry refreshes it, and
// a delay longer than the TTL is refused. Without DelaySet, After and At are refused on
// Redis: a delay kept in the publishing process would be lost with it. Useless without
// After or At, and refused by an inbox.
func DelaySet(dz delayed.DurableZset) PublishOption {
	return func(c *publish.Config) {
		c.Give("DelaySet")
		c.DelaySet = &dz
	}
}

// MaxLen bounds the stream published to at about n entries: the XADD trims the oldest
// (MAXLEN ~ n, which trims whole macro nodes, cheaply). It trims entries whether any
// group has read them or not: bound a stream by size only when losing unread entries
// beats growing without end (a metrics feed); the Stream mount's Trim, which trims only
// what every group acknowledged, is the safe bound for a work queue. Streams only; n
// must be positive; not with MinID or a delay.
func MaxLen(n int64) PublishOption {
	return func(c *publish.Config) {
		c.Give("MaxLen")
		c.MaxLen = n
	}
}

// MinID trims the stream published to of the entries whose ids are below id (XADD
// MINID id, exactly), e.g. "1733040000000-0" for those older than that millisecond; like
// MaxLen it ignores whether groups read them. Streams only; not with MaxLen or a
// delay.
func MinID(id string) PublishOption {
	return func(c *publish.Config) {
		c.Give("MinID")
		c.MinID = id
	}
}

// publishOptions applies opts.
func publishOptions(opts []PublishOption) publish.Config {
	var c publish.Config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}
