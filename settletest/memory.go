package settletest

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// KindMemory is the transport kind of a Memory source, as mount names show it.
const KindMemory = "memory"

// memoryBlock bounds one read of a Memory source, and so how long a shutdown waits for
// a read in progress.
const memoryBlock = 20 * time.Millisecond

// Memory is an in-memory source: handlers run through the same settlement engine as on
// Redis, with no server at all. Publish puts a message in. Retry redelivers it with the
// attempt + 1 (a copy carrying the retry-count header, as a stream's retry does);
// RetryAfter redelivers it exactly once the delay has passed on the App's clock (a
// test's fake Clock, so Advance brings it due); dead letters are kept and read with
// DeadLetters. Messages outlive the Apps that consume them, so a Memory can be shared by
// an App that stops and one that starts. Make one with NewMemory.
type Memory struct {
	dead     []DeadLetter
	inflight int // delivered, not yet settled, over every transport
	mu       sync.Mutex
	name     string
	parked   []*parkedMessage
	paused   bool
	ready    []*memoryMessage
	seq      uint64
	wake     chan struct{} // closed and replaced on every change
}

// DeadLetter is one message a Memory source dead-lettered.
type DeadLetter struct {
	// Dest is the mount's DeadLetter destination.
	Dest string
	// Headers are the message's headers as they arrived, with the retry count set to the
	// attempts spent and the settle.HeaderDead* headers added.
	Headers map[string]string
	// ID is the dead-lettered delivery's id.
	ID string
	// Payload is the message's payload as it arrived.
	Payload []byte
}

type memoryMessage struct {
	headers    map[string]string
	hasPayload bool
	id         string
	payload    []byte
}

type parkedMessage struct {
	due time.Time
	msg *memoryMessage
}

var _ settle.Source = (*Memory)(nil)

// NewMemory returns an empty in-memory source; name names it in mount names and
// deliveries' Key.
func NewMemory(name string) *Memory {
	return &Memory{name: name, wake: make(chan struct{})}
}

// DeadLetters returns the messages dead-lettered so far, oldest first.
func (m *Memory) DeadLetters() []DeadLetter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]DeadLetter(nil), m.dead...)
}

// InFlight returns how many messages were delivered and not yet settled.
func (m *Memory) InFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inflight
}

// Len returns how many messages wait for a delivery now (parked ones excluded).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ready)
}

// Parked returns how many messages wait for a RetryAfter delay to pass.
func (m *Memory) Parked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.parked)
}

// Publish puts a message in: payload as it is (use settle.Msgpack.Marshal for a typed
// handler) and headers (may be nil). It returns the message's id.
func (m *Memory) Publish(payload []byte, headers map[string]string) string {
	h := make(map[string]string, len(headers))
	for k, v := range headers {
		h[k] = v
	}
	if payload == nil {
		payload = []byte{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	msg := &memoryMessage{headers: h, hasPayload: true, id: m.nextID(), payload: payload}
	m.ready = append(m.ready, msg)
	m.changed()
	return msg.id
}

// Transport is for settle's own use and may change in any release.
func (m *Memory) Transport(env source.Env) source.Transport {
	return &memoryTransport{clock: env.Clock, m: m}
}

// changed wakes waiting reads; called with m.mu held.
func (m *Memory) changed() {
	close(m.wake)
	m.wake = make(chan struct{})
}

// nextID returns a new message id; called with m.mu held.
func (m *Memory) nextID() string {
	m.seq++
	return strconv.FormatUint(m.seq, 10)
}

// memoryTransport is one mount's consumer of a Memory.
type memoryTransport struct {
	clock clock.Clock
	m     *Memory

	mu       sync.Mutex
	inflight map[string]*memoryMessage
}

func (t *memoryTransport) Info() source.Info {
	return source.Info{
		Batch: settle.DefaultBatch,
		Block: memoryBlock,
		Caps:  source.Caps{Parks: true, Releases: true, RetryWithoutCap: source.ActionCopy},
		Key:   t.m.name,
		Kind:  source.Kind(KindMemory),
	}
}

func (t *memoryTransport) Validate(source.Policy) []error {
	if t.clock == nil {
		return []error{fmt.Errorf("memory %q: no clock", t.m.name)}
	}
	return nil
}

func (t *memoryTransport) Open(context.Context) error {
	t.mu.Lock()
	t.inflight = map[string]*memoryMessage{}
	t.mu.Unlock()
	return nil
}

func (t *memoryTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	m := t.m
	var deadline <-chan time.Time
	if wait >= 0 {
		rt := time.NewTimer(wait)
		defer rt.Stop()
		deadline = rt.C
	}
	for {
		now := t.clock.Now()
		m.mu.Lock()
		m.release(now)
		var ds []*source.Delivery
		for len(m.ready) > 0 && len(ds) < max {
			msg := m.ready[0]
			m.ready = m.ready[1:]
			ds = append(ds, t.deliver(msg))
			m.inflight++
		}
		var next time.Time
		if len(m.parked) > 0 {
			next = m.parked[0].due
		}
		wake := m.wake
		m.mu.Unlock()
		if len(ds) > 0 || wait < 0 {
			return ds, nil
		}
		var due <-chan time.Time
		var ct clock.Timer
		if !next.IsZero() {
			ct = t.clock.NewTimer(next.Sub(now))
			// The clock may have been advanced between reading now and making the timer.
			if !t.clock.Now().Before(next) {
				ct.Stop()
				continue
			}
			due = ct.C()
		}
		var err error
		stop := false
		select {
		case <-wake:
		case <-due:
		case <-deadline:
			stop = true
		case <-ctx.Done():
			stop, err = true, ctx.Err()
		}
		if ct != nil {
			ct.Stop()
		}
		if stop {
			return nil, err
		}
	}
}

// release moves parked messages due at now to the ready queue, in due order; called
// with m.mu held.
func (m *Memory) release(now time.Time) {
	n := 0
	for _, p := range m.parked {
		if p.due.After(now) {
			break
		}
		m.ready = append(m.ready, p.msg)
		n++
	}
	m.parked = m.parked[n:]
}

func (t *memoryTransport) deliver(msg *memoryMessage) *source.Delivery {
	rc, err := strconv.Atoi(msg.headers[settle.HeaderRetryCount])
	if err != nil || rc < 0 {
		rc = 0
	}
	t.mu.Lock()
	t.inflight[msg.id] = msg
	t.mu.Unlock()
	headers := make(map[string]string, len(msg.headers))
	for k, v := range msg.headers {
		headers[k] = v
	}
	return &source.Delivery{
		Attempt:    rc + 1,
		HasPayload: msg.hasPayload,
		Headers:    headers,
		ID:         msg.id,
		Key:        t.m.name,
		Payload:    msg.payload,
		RetryCount: rc,
		Raw:        msg,
	}
}

func (t *memoryTransport) done(d *source.Delivery) {
	t.mu.Lock()
	_, ok := t.inflight[d.ID]
	delete(t.inflight, d.ID)
	t.mu.Unlock()
	if ok {
		t.m.mu.Lock()
		t.m.inflight--
		t.m.mu.Unlock()
	}
}

func (t *memoryTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	for _, d := range ds {
		t.done(d)
	}
	return nil
}

// Moves applies each move at once: a retry copy joins the queue, a parked one waits
// until its delay has passed on the App's clock, a dead letter is kept.
func (t *memoryTransport) Moves(_ context.Context, ms []source.Move) []error {
	return source.EachMove(ms, func(mv source.Move) error {
		d, m := mv.Delivery, t.m
		switch mv.Action {
		case source.ActionCopy, source.ActionPark, source.ActionDeadLetter, source.ActionRelease:
		default:
			return source.UnsupportedMove(source.Kind(KindMemory), mv)
		}
		t.done(d)
		m.mu.Lock()
		defer m.mu.Unlock()
		switch mv.Action {
		case source.ActionCopy:
			m.ready = append(m.ready, t.copyOf(d, mv.Headers))
			m.changed()
		case source.ActionRelease: // back to the front, as it was
			m.ready = append([]*memoryMessage{d.Raw.(*memoryMessage)}, m.ready...)
			m.changed()
		case source.ActionPark:
			due := t.clock.Now().Add(mv.Delay)
			m.parked = append(m.parked, &parkedMessage{due: due, msg: t.copyOf(d, mv.Headers)})
			sort.SliceStable(m.parked, func(i, j int) bool { return m.parked[i].due.Before(m.parked[j].due) })
			m.changed()
		default:
			m.dead = append(m.dead, DeadLetter{Dest: mv.Dest, Headers: maps.Clone(mv.Headers), ID: d.ID, Payload: d.Payload})
		}
		return nil
	})
}

// copyOf returns the retry copy of d; called with m.mu held.
func (t *memoryTransport) copyOf(d *source.Delivery, headers map[string]string) *memoryMessage {
	h := make(map[string]string, len(headers))
	for k, v := range headers {
		h[k] = v
	}
	return &memoryMessage{headers: h, hasPayload: d.HasPayload, id: t.m.nextID(), payload: d.Payload}
}

// Close returns deliveries that were never settled to the front of the queue, as a
// stream's pending entries come again.
func (t *memoryTransport) Close(context.Context) error {
	t.mu.Lock()
	left := make([]*memoryMessage, 0, len(t.inflight))
	for _, msg := range t.inflight {
		left = append(left, msg)
	}
	t.inflight = map[string]*memoryMessage{}
	t.mu.Unlock()
	if len(left) == 0 {
		return nil
	}
	sort.Slice(left, func(i, j int) bool {
		a, _ := strconv.ParseUint(left[i].id, 10, 64)
		b, _ := strconv.ParseUint(left[j].id, 10, 64)
		return a < b
	})
	m := t.m
	m.mu.Lock()
	m.inflight -= len(left)
	m.ready = append(left, m.ready...)
	m.changed()
	m.mu.Unlock()
	return nil
}
