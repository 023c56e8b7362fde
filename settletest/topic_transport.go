package settletest

import (
	"context"
	"errors"
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

// topicBlock bounds one read of a topic, and so how long a shutdown waits for a read
// in progress.
const topicBlock = 20 * time.Millisecond

// Transport is for settle's own use and may change in any release.
func (t *Topic) Transport(env source.Env) source.Transport {
	return &topicTransport{clock: env.Clock, policy: env.Policy, topic: t}
}

// topicTransport is one mount's consumer of a topic.
type topicTransport struct {
	clock  clock.Clock
	policy source.Policy
	topic  *Topic

	mu       sync.Mutex
	inflight map[string]*brokerMessage
}

func (c *topicTransport) Info() source.Info {
	return source.Info{
		Batch: settle.DefaultBatch,
		Block: topicBlock,
		Caps: source.Caps{
			Parks:           !c.topic.broker.cfg.noDelays,
			Releases:        true,
			Replies:         true,
			RetryWithoutCap: source.ActionCopy,
		},
		Key:  c.topic.name,
		Kind: source.Kind(KindTopic),
	}
}

func (c *topicTransport) Validate(p source.Policy) []error {
	var errs []error
	if c.clock == nil {
		errs = append(errs, fmt.Errorf("topic %q: no clock", c.topic.name))
	}
	if c.topic.name == "" {
		errs = append(errs, errors.New("topic: name is empty"))
	}
	if p.DeadLetter == c.topic.name {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the topic the mount reads: dead letters would be read again", p.DeadLetter))
	}
	if p.ReplyTo == c.topic.name {
		errs = append(errs, fmt.Errorf("ReplyTo(%q) is the topic the mount reads: replies would be read as requests", p.ReplyTo))
	}
	return errs
}

func (c *topicTransport) Open(context.Context) error {
	c.mu.Lock()
	c.inflight = map[string]*brokerMessage{}
	c.mu.Unlock()
	return nil
}

func (c *topicTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	t, mu := c.topic, &c.topic.broker.mu
	var deadline <-chan time.Time
	if wait >= 0 {
		rt := time.NewTimer(wait)
		defer rt.Stop()
		deadline = rt.C
	}
	for {
		now := c.clock.Now()
		mu.Lock()
		t.release(now)
		var ds []*source.Delivery
		for len(t.ready) > 0 && len(ds) < max {
			msg := t.ready[0]
			t.ready = t.ready[1:]
			ds = append(ds, c.deliver(msg))
			t.inflight++
		}
		var next time.Time
		if len(t.parked) > 0 {
			next = t.parked[0].due
		}
		wake := t.wake
		mu.Unlock()
		if len(ds) > 0 || wait < 0 {
			return ds, nil
		}
		var due <-chan time.Time
		var ct clock.Timer
		if !next.IsZero() {
			ct = c.clock.NewTimer(next.Sub(now))
			// The clock may have been advanced between reading now and making the timer.
			if !c.clock.Now().Before(next) {
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

// Paused reports whether the topic is paused (see Topic.Pause).
func (c *topicTransport) Paused(context.Context) (bool, error) {
	c.topic.broker.mu.Lock()
	defer c.topic.broker.mu.Unlock()
	return c.topic.paused, nil
}

// deliver hands msg out; called with broker.mu held.
func (c *topicTransport) deliver(msg *brokerMessage) *source.Delivery {
	rc, err := strconv.Atoi(msg.headers[settle.HeaderRetryCount])
	if err != nil || rc < 0 {
		rc = 0
	}
	c.mu.Lock()
	c.inflight[msg.id] = msg
	c.mu.Unlock()
	return &source.Delivery{
		Attempt:    rc + 1,
		HasPayload: msg.hasPayload,
		Headers:    maps.Clone(msg.headers),
		ID:         msg.id,
		Key:        c.topic.name,
		Payload:    msg.payload,
		RetryCount: rc,
		Raw:        msg,
	}
}

// done forgets d as in flight and reports whether it was (false: settled already, or
// handed back by Close); called with broker.mu held.
func (c *topicTransport) done(d *source.Delivery) bool {
	c.mu.Lock()
	_, ok := c.inflight[d.ID]
	delete(c.inflight, d.ID)
	c.mu.Unlock()
	if ok {
		c.topic.inflight--
	}
	return ok
}

func (c *topicTransport) Ack(_ context.Context, ds []*source.Delivery) error {
	c.topic.broker.mu.Lock()
	defer c.topic.broker.mu.Unlock()
	for _, d := range ds {
		c.done(d)
	}
	return nil
}

// errNotInFlight is the error of a settlement of a delivery the mount no longer holds.
var errNotInFlight = errors.New("the delivery is no longer in flight on this mount: nothing written")

// Moves applies each move under the broker's lock, so that each is one atomic step: a
// retry copy joins the topic, a parked one waits there until its delay has passed on
// the App's clock, a dead letter is published to its topic, replies to the ReplyTo
// topic, each with the completion of the original.
func (c *topicTransport) Moves(_ context.Context, ms []source.Move) []error {
	b := c.topic.broker
	b.mu.Lock()
	defer b.mu.Unlock()
	return source.EachMove(ms, func(mv source.Move) error {
		d, t := mv.Delivery, c.topic
		switch mv.Action {
		case source.ActionCopy, source.ActionDeadLetter, source.ActionRelease, source.ActionReply:
		case source.ActionPark:
			if b.cfg.noDelays {
				return source.UnsupportedMove(source.Kind(KindTopic), mv)
			}
		default:
			return source.UnsupportedMove(source.Kind(KindTopic), mv)
		}
		if !c.done(d) {
			return fmt.Errorf("topic %q: %s of %s: %w", t.name, mv.Action, d.ID, errNotInFlight)
		}
		switch mv.Action {
		case source.ActionCopy:
			t.push(copyOf(d, mv.Headers))
		case source.ActionRelease: // back to the front, as it was
			t.ready = append([]*brokerMessage{d.Raw.(*brokerMessage)}, t.ready...)
			t.changed()
		case source.ActionPark:
			msg := copyOf(d, mv.Headers)
			msg.id = b.nextID()
			t.parked = append(t.parked, &parkedMessage{due: c.clock.Now().Add(mv.Delay), msg: msg})
			sort.SliceStable(t.parked, func(i, j int) bool { return t.parked[i].due.Before(t.parked[j].due) })
			t.changed()
		case source.ActionReply:
			dest := b.topic(c.policy.ReplyTo)
			for _, out := range mv.Outputs {
				dest.push(&brokerMessage{headers: maps.Clone(out.Headers), hasPayload: true, payload: out.Payload})
			}
		default: // ActionDeadLetter
			b.topic(mv.Dest).push(copyOf(d, mv.Headers))
		}
		return nil
	})
}

// copyOf returns a new message with d's payload and headers.
func copyOf(d *source.Delivery, headers map[string]string) *brokerMessage {
	return &brokerMessage{headers: maps.Clone(headers), hasPayload: d.HasPayload, payload: d.Payload}
}

// Close returns deliveries that were never settled to the front of the topic, as a
// stream's pending entries come again.
func (c *topicTransport) Close(context.Context) error {
	t := c.topic
	t.broker.mu.Lock()
	defer t.broker.mu.Unlock()
	c.mu.Lock()
	left := make([]*brokerMessage, 0, len(c.inflight))
	for _, msg := range c.inflight {
		left = append(left, msg)
	}
	c.inflight = map[string]*brokerMessage{}
	c.mu.Unlock()
	if len(left) == 0 {
		return nil
	}
	sort.Slice(left, func(i, j int) bool {
		a, _ := strconv.ParseUint(left[i].id, 10, 64)
		b, _ := strconv.ParseUint(left[j].id, 10, 64)
		return a < b
	})
	t.inflight -= len(left)
	t.ready = append(left, t.ready...)
	t.changed()
	return nil
}
