package settletest

import (
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/settlekit/settle"
)

// KindTopic is the transport kind of a Broker's topic, as mount names show it.
const KindTopic = "topic"

// Broker is an in-memory message broker: named topics in one
// value, with no server at all. A Topic is a settle.Source, so handlers run through the
// same settlement engine as on Redis: Retry redelivers a copy with the retry count + 1;
// RetryAfter redelivers it exactly once the delay has passed on the App's clock (a
// test's fake Clock, so Advance brings it due); dead letters and replies are published
// to topics (DeadLetter and ReplyTo name them) that other mounts read, and a reply is
// written in the same step as the original's completion. Messages outlive the Apps that
// consume them: one App may stop and another start on the same broker. Make one with
// NewBroker.
type Broker struct {
	cfg brokerConfig

	mu     sync.Mutex // guards everything below and every Topic's state
	seq    uint64
	topics map[string]*Topic
}

// BrokerOption configures NewBroker.
type BrokerOption interface {
	applyBroker(*brokerConfig)
}

type brokerConfig struct {
	noDelays bool
}

type brokerOptionFunc func(*brokerConfig)

func (f brokerOptionFunc) applyBroker(c *brokerConfig) { f(c) }

// WithoutDelays makes a broker that cannot delay a delivery, as many brokers cannot:
// RetryAfter then waits in the App's process, which publishes a copy back to the
// subscription's topic once the delay has passed. Defaults to a broker that keeps each
// delay itself.
func WithoutDelays() BrokerOption {
	return brokerOptionFunc(func(c *brokerConfig) { c.noDelays = true })
}

// NewBroker returns a broker with no topics yet.
func NewBroker(opts ...BrokerOption) *Broker {
	b := &Broker{topics: map[string]*Topic{}}
	for _, o := range opts {
		if o != nil {
			o.applyBroker(&b.cfg)
		}
	}
	return b
}

// Topic returns the topic named name, making it on first use: one name, one topic.
func (b *Broker) Topic(name string) *Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.topic(name)
}

// topic is Topic with b.mu held.
func (b *Broker) topic(name string) *Topic {
	t, ok := b.topics[name]
	if !ok {
		t = &Topic{broker: b, name: name, wake: make(chan struct{})}
		b.topics[name] = t
	}
	return t
}

// nextID returns a new message id, unique in the broker; called with b.mu held.
func (b *Broker) nextID() string {
	b.seq++
	return strconv.FormatUint(b.seq, 10)
}

// Topic is one named queue of a Broker. Mount it as a settle.Source: the mounts reading
// one topic share its messages, each delivered to one of them at a time.
type Topic struct {
	broker *Broker
	name   string

	// Guarded by broker.mu.
	inflight int // delivered, not yet settled, over every mount
	parked   []*parkedMessage
	paused   bool
	ready    []*brokerMessage
	wake     chan struct{} // closed and replaced on every change
}

// TopicMessage is one message waiting in a topic.
type TopicMessage struct {
	// Headers are the message's headers.
	Headers map[string]string
	// ID identifies the message in its broker.
	ID string
	// Payload is the message's payload.
	Payload []byte
}

type brokerMessage struct {
	headers    map[string]string
	hasPayload bool
	id         string
	payload    []byte
}

type parkedMessage struct {
	due time.Time
	msg *brokerMessage
}

var _ settle.Source = (*Topic)(nil)

// InFlight returns how many of the topic's messages were delivered and not yet settled.
func (t *Topic) InFlight() int {
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	return t.inflight
}

// Len returns how many messages wait for a delivery now (parked ones excluded).
func (t *Topic) Len() int {
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	return len(t.ready)
}

// Messages returns the messages waiting for a delivery now, oldest first (parked ones
// excluded), without taking them: what a test reads from a dead-letter or reply topic
// nobody consumes.
func (t *Topic) Messages() []TopicMessage {
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	out := make([]TopicMessage, len(t.ready))
	for i, m := range t.ready {
		out[i] = TopicMessage{Headers: maps.Clone(m.headers), ID: m.id, Payload: append([]byte(nil), m.payload...)}
	}
	return out
}

// Name returns the topic's name.
func (t *Topic) Name() string { return t.name }

// Parked returns how many messages wait for a RetryAfter delay to pass.
func (t *Topic) Parked() int {
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	return len(t.parked)
}

// Pause pauses the mounts reading the topic, as an operator pauses a Redis source with
// settle/admin: within a second of the App's clock they read nothing new, and finish
// and settle what they hold.
func (t *Topic) Pause() { t.setPaused(true) }

// Publish puts a message in: payload as it is (encode it with the mount's codec, say
// settle.Msgpack.Marshal, for a typed handler) and headers (may be nil). It returns
// the message's id.
func (t *Topic) Publish(payload []byte, headers map[string]string) string {
	if payload == nil {
		payload = []byte{}
	}
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	return t.push(&brokerMessage{headers: maps.Clone(headers), hasPayload: true, payload: payload})
}

// Resume resumes the mounts reading the topic (see Pause).
func (t *Topic) Resume() { t.setPaused(false) }

func (t *Topic) setPaused(p bool) {
	t.broker.mu.Lock()
	t.paused = p
	t.broker.mu.Unlock()
}

// changed wakes waiting reads; called with broker.mu held.
func (t *Topic) changed() {
	close(t.wake)
	t.wake = make(chan struct{})
}

// push appends msg with a new id to the ready queue; called with broker.mu held.
func (t *Topic) push(msg *brokerMessage) string {
	if msg.headers == nil {
		msg.headers = map[string]string{}
	}
	msg.id = t.broker.nextID()
	t.ready = append(t.ready, msg)
	t.changed()
	return msg.id
}

// release moves parked messages due at now to the ready queue, in due order; called
// with broker.mu held.
func (t *Topic) release(now time.Time) {
	n := 0
	for _, p := range t.parked {
		if p.due.After(now) {
			break
		}
		t.ready = append(t.ready, p.msg)
		n++
	}
	t.parked = t.parked[n:]
}
