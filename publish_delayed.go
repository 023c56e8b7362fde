package settle

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/publish"
	"github.com/settlekit/settle/internal/script"
)

// delay parks a delayed publish's member (encoded for kind: "stream", "list" or
// "channel") in c's delay set, due at the Redis server's TIME + After (or at At), in
// one script. key is the stream or list the set's sweep delivers into ("" for a
// channel, which is not a key and may live in any slot).
func (p *Publisher) delay(ctx context.Context, c publish.Config, key, kind, member string) error {
	where := fmt.Sprintf("%s %q", kind, key)
	if key == "" {
		where = kind
	}
	if err := checkDelayedPublish(c, key); err != nil {
		return fmt.Errorf("settle: publish to %s: %w", where, err)
	}
	at := int64(-1)
	if !c.At.IsZero() {
		at = c.At.UnixMilli()
	}
	destType := kind
	if key == "" {
		destType = ""
	}
	if _, err := script.DelayPublish(ctx, p.rdb, c.DelaySet.Key, key, destType, member, c.After, at, c.DelaySet.TTL); err != nil {
		return fmt.Errorf("settle: publish to %s after a delay: %w", where, err)
	}
	return nil
}

// checkDelayedPublish returns the refusal of a delayed publish to key: a delay needs a
// durable delay set (a delay kept in the publishing process would die with it), the
// set a delay (alone it is a mistake), and both one hash slot.
func checkDelayedPublish(c publish.Config, key string) error {
	if err := c.CheckDelay(); err != nil {
		return err
	}
	switch dz := c.DelaySet; {
	case !c.Delayed():
		return errors.New("option DelaySet without After or At: give the delay")
	case dz == nil:
		return errors.New("option After or At needs DelaySet(delayed.DurableZset{…}), the delay set of the consumer's mount: a delay held in the publishing process would be lost with it, and Redis keeps none of its own")
	case dz.Key == "":
		return errors.New("option DelaySet(delayed.DurableZset{}): Key is empty")
	case dz.TTL < 0:
		return fmt.Errorf("option DelaySet(delayed.DurableZset{TTL: %s}): TTL must not be negative", dz.TTL)
	case dz.TTL > 0 && c.AfterSet && c.After >= dz.TTL:
		return fmt.Errorf("After(%s) is not within the delay set's TTL of %s: the set could expire with the message in it", c.After, dz.TTL)
	case key == "":
		return nil
	case dz.Key == key:
		return fmt.Errorf("option DelaySet(delayed.DurableZset{Key: %q}): the delay set's key is the destination's", dz.Key)
	}
	if err := keys.SameSlot(key, c.DelaySet.Key); err != nil {
		return fmt.Errorf("the destination and its delay set must share a hash slot (the sweep moves between them in one script): %w", err)
	}
	return nil
}

// checkStreamBounds returns the refusal of a stream publish's length bounds: MaxLen
// must be positive, not with MinID, and neither with a delay (the entry is written
// later, by the sweep, which does not trim).
func checkStreamBounds(c publish.Config) error {
	bounded := c.Has("MaxLen") || c.Has("MinID")
	switch {
	case c.Has("MaxLen") && c.MaxLen <= 0:
		return fmt.Errorf("MaxLen(%d): n must be positive", c.MaxLen)
	case c.Has("MinID") && c.MinID == "":
		return errors.New(`MinID(""): give an entry id`)
	case c.Has("MaxLen") && c.Has("MinID"):
		return errors.New("options MaxLen and MinID both given: give one")
	case bounded && (c.Delayed() || c.Has("DelaySet")):
		return errors.New("option MaxLen or MinID with a delay: the entry is written later by the delay set's sweep, which does not trim; bound the stream with the mount's Trim")
	}
	return nil
}

// publishToken is the id part of a delayed stream publish's member: unique, so two
// equal messages stay two members (a parked retry uses its entry's id).
func publishToken() string { return "publish-" + rand.Text() }
