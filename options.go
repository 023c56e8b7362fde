package settle

import (
	"fmt"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// MountOption configures one mount (App.Mount). Options never fail: App.Validate
// reports values it refuses.
type MountOption interface {
	applyMount(*mountConfig)
}

type mountConfig struct {
	backoff          func(attempt int, err error) time.Duration
	codec            Codec
	concurrency      int
	deadLetter       string
	deadLetterMaxLen int64
	dedupe           *dedupe
	delay            delayed.Strategy
	limits           []flowLimit // RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency, in order
	maxAttempts      int
	maxAttemptsSet   bool // MaxAttempts was given: 0 is refused, not "no cap"
	middleware       []Middleware
	name             string
	ordered          bool // Ordered: one delivery of a key at a time, in stream order
	prefetch         int
	prefetchSet      bool  // Prefetch was given; else the source's Batch
	prefetchBytes    int64 // PrefetchBytes
	prefetchBytesSet bool  // PrefetchBytes was given; else DefaultPrefetchBytes
	replicas         replicaWait
	replier          Replier
	replyTo          string
	timeout          time.Duration
}

// DefaultConcurrency is how many handlers of one mount run at once unless Concurrency
// says otherwise.
const DefaultConcurrency = 10

func defaultMountConfig() mountConfig {
	return mountConfig{backoff: DefaultBackoff, codec: Msgpack, concurrency: DefaultConcurrency, delay: delayed.InProcess{}, timeout: DefaultTimeout}
}

type mountOptionFunc func(*mountConfig)

func (f mountOptionFunc) applyMount(c *mountConfig) { f(c) }

// MaxAttempts caps the deliveries of one message, the first included: the n-th failed
// delivery is not retried but dead-lettered (or, with no DeadLetter declared, rejected
// with a warning). A delayed retry counts like an immediate one. With a cap, every
// transport but the claiming stream retries by writing a copy, so the count travels with
// the message. n must be at least 1. Defaults to no cap.
func MaxAttempts(n int) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.maxAttempts, c.maxAttemptsSet = n, true })
}

// DeadLetter names where a message goes once its attempts are spent: a destination of
// the kind the message arrived on (a stream key for a stream mount). The dead letter
// keeps the payload and headers as they arrived, with the retry count set to the
// attempts spent and the HeaderDead* headers added; writing it and completing the
// original is one atomic step. Declared without MaxAttempts, the first failure
// dead-letters. Drop never dead-letters. Defaults to none.
func DeadLetter(dest string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.deadLetter = dest })
}

// DeadLetterMaxLen bounds a dead-letter stream to about n entries (XADD MAXLEN ~ n):
// the oldest dead letters are trimmed. Only a stream's dead letters can be trimmed: a
// mount of any other source with this option is refused. Defaults to unbounded.
func DeadLetterMaxLen(n int64) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.deadLetterMaxLen = n })
}

// Concurrency sets how many handlers of the mount run at once. It does not bound reads:
// see Prefetch. Defaults to DefaultConcurrency.
func Concurrency(n int) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.concurrency = n })
}

// Prefetch sets how many deliveries the mount may hold read but not started, beside the
// Concurrency it runs: a read asks for a full Batch whenever that much room is free, so
// that a slow handler with Concurrency(1) still costs one read per batch, not one per
// message. What waits is as safe as what runs: a stream entry stays pending to this
// consumer (its heartbeat covers it), a list item in the processing list, an inbox row
// leased; a graceful stop hands back what never started without spending an attempt.
// On a List or PubSub, what waits is lost if the process dies. n must not be negative.
// Defaults to twice the source's Batch, eight times on a mount that reads ahead (a
// Stream, ClaimingStream or ReliableList with more than one handler, unordered, without
// flow limits): the next reads go out while batches are still being handled and
// settled. Either way PrefetchBytes bounds it by the size of the payloads.
func Prefetch(n int) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.prefetch, c.prefetchSet = n, true })
}

// DefaultPrefetchBytes is how many payload bytes a mount's Prefetch may hold by default
// (PrefetchBytes).
const DefaultPrefetchBytes = 64 << 20

// PrefetchBytes bounds, in payload bytes, what Prefetch may hold: at the mean payload
// size of the mount's recent reads, a read asks for no more than fits in n beside the
// Concurrency it runs, and waits while the mount holds more (it never holds fewer than
// Concurrency deliveries for it, and reads one at a time when one payload is larger
// than n). A mount of small messages reads ahead as Prefetch says; one of large ones
// does not hold Prefetch times their size. n must be positive. Defaults to
// DefaultPrefetchBytes (64 MiB).
func PrefetchBytes(n int64) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.prefetchBytes, c.prefetchBytesSet = n, true })
}

// Backoff sets how long a delivery that failed with a plain error (not Drop, Retry or
// RetryAfter: an error of its own, a panic, a payload that does not decode) waits
// before it is delivered again: f(attempt, err), the attempt being the one that failed.
// The wait is kept where DelayIn says, like RetryAfter's (so a test kit's Advance passes
// it); 0 or less retries at once. An explicit Retry(err) still retries at once, as
// RetryAfter(d, err) waits d. A ClaimingStream without a durable delay set waits its
// minIdle instead; a List or PubSub without MaxAttempts loses the message as its Retry
// does. Defaults to DefaultBackoff.
func Backoff(f func(attempt int, err error) time.Duration) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.backoff = f })
}

// DefaultTimeout is how long a handler may run unless Timeout says otherwise.
const DefaultTimeout = 10 * time.Minute

// Timeout bounds how long one handler call may run: past d (on the App's clock) its
// context is cancelled with the cause ErrHandlerTimeout and the delivery is settled at
// once as a failure (retried after the backoff, counted toward MaxAttempts), so that a
// hung handler cannot hold a message forever: it stops being heartbeated, and whatever
// the handler returns later is ignored (logged). d must be positive. Defaults to
// DefaultTimeout.
func Timeout(d time.Duration) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.timeout = d })
}

// DelayIn chooses where RetryAfter delays wait. Defaults to delayed.InProcess{}.
func DelayIn(s delayed.Strategy) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.delay = s })
}

// Name names the mount in logs, errors and OnSettled events. Defaults to
// "<kind> <key>" plus "/<group>" where the source has a group.
func Name(name string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.name = name })
}

// Use wraps the mount's handler in middleware; the first one given is the outermost.
func Use(mw ...Middleware) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.middleware = append(c.middleware, mw...) })
}

// CodecOption is both a MountOption and a PublisherOption: see WithCodec.
type CodecOption struct{ codec Codec }

// WithCodec sets the payload codec of a mount (used by Message.Decode and Typed) or a
// Publisher. Defaults to Msgpack.
func WithCodec(c Codec) CodecOption { return CodecOption{codec: c} }

func (o CodecOption) applyMount(c *mountConfig)         { c.codec = o.codec }
func (o CodecOption) applyPublisher(c *publisherConfig) { c.codec = o.codec }

// ReadOption configures how a source reads (Batch, Block). It is an option of every
// Redis source: a StreamOption, a ClaimingStreamOption, a ListOption, a
// ReliableListOption and a PubSubOption.
type ReadOption struct {
	set func(batch *int, block *time.Duration)
}

func (o ReadOption) applyStream(c *streamConfig)         { o.set(&c.batch, &c.block) }
func (o ReadOption) applyClaimingStream(c *streamConfig) { o.set(&c.batch, &c.block) }

// Batch sets the most messages (stream entries, list items, channel messages) one read
// asks for; a read never asks for more than the mount has free handler slots. Defaults
// to DefaultBatch.
func Batch(n int) ReadOption {
	return ReadOption{set: func(batch *int, _ *time.Duration) { *batch = n }}
}

// Block sets the longest a read blocks waiting for entries. It bounds how long a
// graceful shutdown waits for a read in progress (go-redis cannot interrupt one). Lists
// block in whole seconds (BLPOP, BLMOVE): a list rounds Block up to the next second.
// Defaults to DefaultBlock.
func Block(d time.Duration) ReadOption {
	return ReadOption{set: func(_ *int, block *time.Duration) { *block = d }}
}

// Consumer sets the consumer name within the group. Give each process a stable name of
// its own (a pod name, say) so that a restarted process first re-reads the entries it
// had been delivered but not settled. Defaults to "<hostname>-<pid>-<random>", unique
// per process.
//
// On a ReliableList the name also names the consumer's processing list and heartbeat.
func Consumer(name string) ConsumerOption {
	return ConsumerOption{name: name}
}

// ConsumerOption names a consumer (see Consumer). It is a StreamOption, a
// ClaimingStreamOption and a ReliableListOption.
type ConsumerOption struct{ name string }

func (o ConsumerOption) applyStream(c *streamConfig)         { c.consumer = o.name }
func (o ConsumerOption) applyClaimingStream(c *streamConfig) { c.consumer = o.name }

func (o ReadOption) applyList(c *listConfig) { o.set(&c.batch, &c.block) }

func (o ReadOption) applyReliableList(c *reliableListConfig)     { o.set(&c.batch, &c.block) }
func (o ConsumerOption) applyReliableList(c *reliableListConfig) { c.consumer = o.name }

func (o ReadOption) applyPubSub(c *pubsubConfig) { o.set(&c.batch, &c.block) }

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

// ReplyTo names where a mount's replies go (see Reply and Message.Reply). Without
// ReplyVia, dest is a destination of the source's own kind in its own store, and the
// transport writes the replies and completes the original in one atomic step, fenced
// like any settlement: a stream key in the source stream's hash slot, a list key beside
// a reliable list, another group (or table) of an inbox's database, another topic of a
// settletest.Broker. A source that cannot do that refuses to start unless ReplyVia is
// given too. Defaults to no replies.
func ReplyTo(dest string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.replyTo = dest })
}

// ReplyVia sends a mount's replies to its ReplyTo destination through r, into another
// store (a stream → a channel, an inbox → Redis). Then the replies are published
// first and the original completed after: a crash or failed ack in between delivers
// the original again and its replies are published again (at least once), and a failed
// publish settles the delivery as a failure (a Retry after the mount's backoff, kept for
// the dead letter), so that no reply is lost. Defaults to the source's own atomic
// replies.
func ReplyVia(r Replier) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.replier = r })
}

// Dedupe skips the deliveries of a message whose key, key(m), was completed (acked, or
// replied) within window, by any process consuming the source: such a delivery is acked
// without running the handler, and says so in its Settled event (Deduplicated) and its
// log line. The completion's mark is written in the same atomic step as its ack or its
// atomic reply (one script, in the source's hash slot): a crash may run a handler again
// (at least once), but a key completed is not run again while its mark lives, window
// from its completion. A key of "" is never deduplicated; a failure, a Drop or a dead
// letter marks nothing. Two deliveries of one key running at the same time both run:
// add ConcurrencyBy(key, 1) to exclude that. Each delivery's mark is read before it
// runs (the reads of deliveries starting together in one call). Stream, ClaimingStream,
// ReliableList and the inbox take it (the inbox keeps its marks in a table of its
// database, written in the transaction that deletes the row); refused on List and
// PubSub, whose messages leave Redis when read (there is no ack to write the mark with),
// and on a PartitionedStream (not yet). window must be positive and key non-nil. Defaults to no
// deduplication.
func Dedupe(window time.Duration, key func(m *Message) string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.dedupe = &dedupe{key: key, window: window} })
}

// dedupe is a mount's Dedupe.
type dedupe struct {
	key    func(*Message) string
	window time.Duration
}

// windowOf is the window of d, 0 for none (nil).
func (d *dedupe) windowOf() time.Duration {
	if d == nil {
		return 0
	}
	return d.window
}

// problems returns the refusals of d on a transport of kind that keeps marks or not.
func (d *dedupe) problems(marks bool, kind source.Kind) []string {
	if d == nil {
		return nil
	}
	var out []string
	if d.window <= 0 {
		out = append(out, fmt.Sprintf("Dedupe(%s, …): the window must be positive", d.window))
	}
	if d.key == nil {
		out = append(out, "Dedupe(…, nil): give a key function (it returns a message's dedup key, \"\" for none)")
	}
	if !marks {
		why := "it keeps no completion marks"
		if kind == source.KindList || kind == source.KindChannel {
			why = "its messages leave Redis when read, so there is no ack to write a completion mark with in one atomic step: a crash after the handler would run a completed key again; use ReliableList or a Stream"
		}
		out = append(out, fmt.Sprintf("Dedupe: a %s source cannot deduplicate: %s", kind, why))
	}
	return out
}

// Flow limits (RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency) hold across
// every process reading the same source (and, on a stream, the same group): their state
// lives beside the source, in keys of its hash slot, and "now" is Redis TIME (on the
// inbox: a table of its database, and its clock). A delivery that must wait is not
// started and spends no attempt; it waits where its transport keeps it (a stream entry
// pending to this consumer and heartbeated, a reliable list item in the processing
// list, an inbox row leased and heartbeated), holding no handler slot and no read room, so the mount
// reads on and other keys' deliveries start without it. It tries again when its limit
// lets it, and its settlement's log line says what it waited for (waited_for, waited).
// At most MaxWaiting deliveries of a mount wait at once; beyond that the mount reads
// nothing new until some start. At a graceful stop, waiting deliveries are handed back
// without an attempt spent.
//
// They are taken by Stream, ClaimingStream, ReliableList and the inbox. A List or PubSub mount
// with one is refused: a delivery waiting there would be lost with its process. The
// processes of one source declare its limits alike (the same kinds in the same order):
// a limit's state is named by its kind and rank.

// MaxWaiting is the most deliveries of one mount that wait for their flow limits at
// once.
const MaxWaiting = 10_000

// SlotLease is how long a concurrency slot (ConcurrencyBy, GlobalConcurrency) stays
// held without a renewal: the process holding it renews it every third of it while the
// delivery runs, so the slots of a process that crashed come free within SlotLease.
const SlotLease = DefaultHeartbeat

// LimitOption refines a rate limit (see LimitBurst).
type LimitOption interface {
	applyLimit(*flowLimit)
}

type limitOptionFunc func(*flowLimit)

func (f limitOptionFunc) applyLimit(l *flowLimit) { f(l) }

// LimitBurst lets a rate limit start up to b deliveries at once after an idle time,
// the rate still holding over any longer window: at most b + n·t/per starts in any
// window t. b must be at least 1. Defaults to 1: starts are spaced evenly, per/n apart.
func LimitBurst(b int) LimitOption {
	return limitOptionFunc(func(l *flowLimit) { l.burst = b })
}

// RateLimit starts at most n of the mount's deliveries per period per, across every
// process reading its source, plus the burst LimitBurst allows: no window of per sees
// more than n + burst starts. To keep that true of the handlers' starts, not only of
// the limit's own clock, the starts are spaced (per + per/50)/n apart (2 % under n) and
// a start that comes more than per/50 after the one its limit let through (a timer that
// fired late, a slow answer from Redis) is given up and asks again, at most three times
// running before it starts however late (a stalled process starts late rather than
// never).
//
// The limit is GCRA (the generic cell rate algorithm), not a token bucket: both admit
// the same starts (GCRA is a token bucket seen as a time), but GCRA keeps one number per
// limit (the theoretical arrival time of the next start) where a bucket keeps two (its
// tokens and when it was refilled), so a take is one GET and one SET with an expiry in
// one script, the key expires by itself once the limit is idle, and a take can reserve
// an exact future start: a delivery due within a second takes its place at once and
// starts then, without polling and without every waiting delivery asking at once. n
// and per must be positive.
func RateLimit(n int, per time.Duration, opts ...LimitOption) MountOption {
	return newFlowLimit("RateLimit", nil, true, n, per, opts)
}

// RateLimitBy starts at most n deliveries per period per for each value key returns
// (an account, a tenant, a provider), across every process, for any number of values:
// a value's state expires once it is idle. A value at its limit never delays the
// deliveries of other values. See RateLimit for the algorithm and LimitBurst. key must
// not be nil, and is called on the message before its handler runs (its Payload and
// Headers as they arrived; Decode works).
func RateLimitBy(key func(*Message) string, n int, per time.Duration, opts ...LimitOption) MountOption {
	return newFlowLimit("RateLimitBy", key, key != nil, n, per, opts)
}

// ConcurrencyBy runs at most n deliveries of each value key returns at once, across
// every process: n = 1 makes a value's deliveries mutually exclusive. A slot is leased
// for SlotLease and renewed while its delivery runs, and fenced: it is held by a token
// of its own, so that a process whose lease ended (it stalled past it) cannot free the
// slot another delivery took since. A value's state expires once no slot of it is
// held. key must not be nil; n must be positive.
func ConcurrencyBy(key func(*Message) string, n int) MountOption {
	return newFlowLimit("ConcurrencyBy", key, key != nil, n, 0, nil)
}

// GlobalConcurrency runs at most n of the mount's deliveries at once across every
// process (Concurrency bounds one process): ConcurrencyBy with one value for all.
func GlobalConcurrency(n int) MountOption {
	return newFlowLimit("GlobalConcurrency", nil, true, n, 0, nil)
}

// flowLimit is one flow limit as declared.
type flowLimit struct {
	burst  int
	hasKey bool // false: a nil key func given to a …By option
	key    func(*Message) string
	n      int
	name   string // the option's name, for refusals
	per    time.Duration
	slots  bool
}

func newFlowLimit(name string, key func(*Message) string, hasKey bool, n int, per time.Duration, opts []LimitOption) MountOption {
	l := flowLimit{burst: 1, hasKey: hasKey, key: key, n: n, name: name, per: per, slots: per == 0 && (name == "ConcurrencyBy" || name == "GlobalConcurrency")}
	for _, o := range opts {
		if o != nil {
			o.applyLimit(&l)
		}
	}
	return mountOptionFunc(func(c *mountConfig) { c.limits = append(c.limits, l) })
}

// Ordered runs the deliveries of one message key (the Publisher's Key, the HeaderKey
// header) one at a time, in stream order, and different keys in parallel up to
// Concurrency: a key's later messages wait in memory until the one before has settled
// (its settlement written). A retry of a key's head, or its RetryAfter delay, is run in
// place, by this consumer, after its backoff or delay, its entry left pending meanwhile
// (reported with ActionLeave), not copied behind the key's later messages, which keep
// waiting; its dead letter (or any other final settlement) releases the key. A message
// without a key is not ordered. Read ahead is off: one read at a time, handed over in
// read order. A handler past its Timeout is settled as a failure and retried in place
// after its backoff: one that ignores its context may still run then.
//
// Order holds while one consumer reads a key. On a PartitionedStream that is the
// partition's owner, whose new owner takes the partition's pending entries first, in
// id order, before new ones. A plain Stream has no owner: Ordered there needs
// Consumer(name), and one process at a time must read the stream under that name (a
// restart re-reads its own pending entries first); a second consumer name would read
// the same keys beside it, out of order. Ordered is refused on other sources (List,
// ReliableList, PubSub, ClaimingStream, the inbox), with HandleBatch and with the flow
// limits (RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency).
//
// Across a crash: a delivery of a key that was running (or waiting to retry in place)
// when its process died may run again, under the consumer that reads the key next; a
// later message of a key never runs before an earlier one has settled. Each attempt
// run in place is written to the entry's delivery count as it starts, so the reader
// after a crash or a stop counts on from it and MaxAttempts holds.
// While a key's head waits out a delay it holds its slot: keys that all wait fill
// Concurrency and Prefetch, and the mount reads nothing new until one settles.
func Ordered() MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.ordered = true })
}

// orderedProblems is what Ordered refuses on this mount: see Ordered.
func (m *mount) orderedProblems() []string {
	if !m.cfg.ordered {
		return nil
	}
	var ps []string
	switch src := m.src.(type) {
	case *PartitionedStreamSource:
	case *StreamSource:
		if src.cfg.consumer == "" {
			ps = append(ps, "Ordered on a Stream needs Consumer(name): one consumer name, read by one process at a time, keeps each key in order (its restart re-reads its pending entries first); or use a PartitionedStream")
		}
	default:
		ps = append(ps, fmt.Sprintf("Ordered: refused on a %T: only a Stream (under one Consumer name) or a PartitionedStream keeps a key's messages in order (a retry there is run in place, its entry kept pending)", m.src))
	}
	if _, batch := m.handler.(batchProblems); batch {
		ps = append(ps, "Ordered: refused with HandleBatch: a batch would run a key's messages together")
	}
	if len(m.cfg.limits) > 0 {
		ps = append(ps, fmt.Sprintf("Ordered: refused with %s: a delivery waiting for its flow limit would let its key's later messages by", m.cfg.limits[0].name))
	}
	return ps
}

// limitProblems returns the refusals of a mount's flow limits.
func (m *mount) limitProblems() []string {
	var ps []string
	for _, l := range m.cfg.limits {
		if !l.hasKey {
			ps = append(ps, fmt.Sprintf("%s(nil, …): give a key function", l.name))
		}
		if l.n <= 0 {
			ps = append(ps, fmt.Sprintf("%s: n is %d; it must be at least 1", l.name, l.n))
		}
		if !l.slots && l.per <= 0 {
			ps = append(ps, fmt.Sprintf("%s: the period is %s; it must be positive", l.name, l.per))
		}
		if !l.slots && l.burst < 1 {
			ps = append(ps, fmt.Sprintf("%s: LimitBurst(%d): the burst must be at least 1", l.name, l.burst))
		}
	}
	if len(m.cfg.limits) == 0 {
		return ps
	}
	if _, ok := m.transport.(source.Limiter); !ok || !m.info.Caps.Releases {
		why := "it cannot keep a delivery that must wait safely (a message held in memory is lost if the process dies)"
		switch m.info.Kind {
		case source.KindList:
			why += ": use ReliableList"
		case source.KindChannel:
			why += ": read a Stream instead"
		}
		ps = append(ps, fmt.Sprintf("%s: refused on a %s source: %s", m.cfg.limits[0].name, m.info.Kind, why))
	}
	return ps
}
