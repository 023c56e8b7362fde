// Package publish holds what one publish call was asked (headers, a delay, a length
// bound) for the Publish families of settle (streams, lists, channels) and of its inbox,
// which share settle.PublishOption. It is not for users.
package publish

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/settlekit/settle/delayed"
)

// Option is what settle.PublishOption's values are: settle's own packages (the inbox)
// apply them through it, since settle.PublishOption's method is unexported.
type Option interface {
	ApplyPublish(c *Config)
}

// Apply applies the options that are Options (every settle.PublishOption is) to a new
// Config.
func Apply[O any](opts []O) Config {
	var c Config
	for _, o := range opts {
		if a, ok := any(o).(Option); ok {
			a.ApplyPublish(&c)
		}
	}
	return c
}

// Config is what the options of one publish call set.
type Config struct {
	// After is the delay (After), when AfterSet.
	After    time.Duration
	AfterSet bool
	// At is the due time (At); zero when not given.
	At time.Time
	// DelaySet is the durable delay set a delayed Redis publish parks in (DelaySet).
	DelaySet *delayed.DurableZset
	// Headers are the message's headers (Header, Headers); nil for none.
	Headers map[string]string
	// Key is the message's key (Key), when Has("Key").
	Key string
	// IdempotencyKey is the publish's idempotency key (IdempotencyKey); "" for none.
	IdempotencyKey string
	// IdempotencyWindow is how long a key's first publish answers for it
	// (IdempotencyWindow); 0: the default.
	IdempotencyWindow time.Duration
	// MaxLen bounds the stream (MaxLen), when positive.
	MaxLen int64
	// MinID trims the stream below it (MinID); "" for none.
	MinID string

	given []string // the options given, by name, in order (each once)
}

// Give records that the option name was given.
func (c *Config) Give(name string) {
	if !c.Has(name) {
		c.given = append(c.given, name)
	}
}

// Has reports whether the option name was given.
func (c *Config) Has(name string) bool {
	for _, g := range c.given {
		if g == name {
			return true
		}
	}
	return false
}

// Delayed reports whether After or At was given.
func (c *Config) Delayed() bool { return c.AfterSet || !c.At.IsZero() }

// Refuse returns an error naming the first option given that kind (a stream, a list,
// a channel, an inbox) does not take: only allowed are.
func (c *Config) Refuse(kind string, allowed ...string) error {
	for _, g := range c.given {
		ok := false
		for _, a := range allowed {
			ok = ok || a == g
		}
		if !ok {
			return fmt.Errorf("option %s does not apply to a publish to %s (it takes %s)", g, kind, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// minAt and maxAt bound At in a delay set: its score is the due time in Unix
// milliseconds, a double, exact within ±2^53 (a time past int64 milliseconds has no
// UnixMilli at all: it was scored as now and delivered at once).
var (
	minAt = time.UnixMilli(-(1 << 53)).UTC()
	maxAt = time.UnixMilli(1 << 53).UTC()
)

// CheckDelaySetAt returns the refusal of an At that a delay set cannot score exactly
// (the Redis publish path; an inbox has bounds of its own).
func (c *Config) CheckDelaySetAt() error {
	if !c.At.IsZero() && (c.At.Before(minAt) || c.At.After(maxAt)) {
		return fmt.Errorf("At(%s): outside the times a delay can be kept until (%s to %s: a delay set scores its members in milliseconds, exactly up to 2^53)", c.At, minAt, maxAt)
	}
	return nil
}

// CheckDelay returns the refusal of the delay options themselves: both After and At, a
// negative After.
func (c *Config) CheckDelay() error {
	switch {
	case c.AfterSet && !c.At.IsZero():
		return errors.New("options After and At both given: give one")
	case c.AfterSet && c.After < 0:
		return fmt.Errorf("After(%s): the delay must not be negative", c.After)
	}
	return nil
}
