package settle

import (
	"context"

	"github.com/settlekit/settle/internal/publish"
)

// PublishHook observes a Publisher's writes (and an inbox's: settle/inbox's
// WithPublishHook): called before each one, it may add headers to the message (a trace
// context, say, so that no call site changes) and returns a function the Publisher
// calls with the write's result, or nil.
type PublishHook func(ctx context.Context, p *Publishing) (done func(id string, err error))

// Publishing describes one publish, for a PublishHook.
type Publishing struct {
	// Headers are the message's headers (never nil): the hook may add its own. Names
	// that start with HeaderPrefix are refused, as from a caller.
	Headers map[string]string
	// Key is the stream or list key, or the channel, written to (an inbox's table: see
	// settle/inbox's WithPublishHook).
	Key string
	// Kind is what is written: "stream", "list", "channel" or "table".
	Kind string
	// Size is the payload's length in bytes.
	Size int
}

// WithPublishHook makes the Publisher call h before each write (see PublishHook).
func WithPublishHook(h PublishHook) PublisherOption { return publishHookOption{h} }

type publishHookOption struct{ h PublishHook }

func (o publishHookOption) applyPublisher(c *publisherConfig) { c.hook = o.h }

// publishing lets the Publisher's hook, if any, add its headers to c's for one publish
// to key, of kind, and returns the hook's completion (nil without a hook).
func (p *Publisher) publishing(ctx context.Context, kind, key string, size int, c *publish.Config) func(id string, err error) {
	if p.cfg.hook == nil {
		return nil
	}
	if c.Headers == nil {
		c.Headers = make(map[string]string, 2)
	}
	return p.cfg.hook(ctx, &Publishing{Headers: c.Headers, Key: key, Kind: kind, Size: size})
}

// published reports a write's result to the hook's completion, if any, and returns err.
func published(done func(id string, err error), id string, err error) error {
	if done != nil {
		done(id, err)
	}
	return err
}
