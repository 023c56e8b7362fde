package redisbase

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
)

// Limits keeps a Redis source's flow limits (source.Limiter) in keys of its hash slot
// (keys.Limit), each step one script; a transport embeds it to be a Limiter.
type Limits struct {
	// Client is the source's client.
	Client redis.UniversalClient
	// Group is the stream's consumer group ("" for a list): each group has its limits.
	Group string
	// Key is the source's key.
	Key string
	// TestClock, when set, gives the scripts "now" (else Redis TIME).
	TestClock clock.Clock
}

var _ source.Limiter = Limits{}

// now is the scripts' "now" argument: the test clock's, or -1 for Redis TIME.
func (l Limits) now() int64 {
	if l.TestClock != nil {
		return l.TestClock.Now().UnixMilli()
	}
	return -1
}

// LimitTake runs limit_take.lua over gates' keys.
func (l Limits) LimitTake(ctx context.Context, gates []source.Gate, token string, horizon time.Duration) (source.Take, error) {
	ls := make([]script.Limit, len(gates))
	for i, g := range gates {
		kind := "rate"
		if g.Slots > 0 {
			kind = "slots"
		}
		ls[i] = script.Limit{Key: keys.Limit(l.Key, l.Group, kind+":"+g.Name, g.Value), Slots: g.Slots, Lease: g.Lease, Interval: g.Interval, Burst: g.Burst}
	}
	t, err := script.LimitTake(ctx, l.Client, ls, token, horizon, l.now())
	return source.Take{Reserved: t.Reserved, Wait: t.Wait, Which: t.Which}, err
}

// LimitRenew runs limit_renew.lua over held's keys.
func (l Limits) LimitRenew(ctx context.Context, held []source.Held, lease time.Duration) ([]int, error) {
	ks, tokens := l.slots(held)
	return script.LimitRenew(ctx, l.Client, ks, tokens, lease, l.now())
}

// LimitRelease runs limit_release.lua over held's keys.
func (l Limits) LimitRelease(ctx context.Context, held []source.Held) error {
	ks, tokens := l.slots(held)
	_, err := script.LimitRelease(ctx, l.Client, ks, tokens)
	return err
}

// slots returns held's keys and tokens.
func (l Limits) slots(held []source.Held) (ks, tokens []string) {
	ks, tokens = make([]string, len(held)), make([]string, len(held))
	for i, h := range held {
		ks[i], tokens[i] = keys.Limit(l.Key, l.Group, "slots:"+h.Name, h.Value), h.Token
	}
	return ks, tokens
}

var _ source.WaitReporter = Limits{}

// LimitWaiting runs limit_waiting.lua on the source's waiting counts (keys.LimitWaiting).
func (l Limits) LimitWaiting(ctx context.Context, process string, counts []int, ttl time.Duration) error {
	_, err := script.LimitWaiting(ctx, l.Client, keys.LimitWaiting(l.Key, l.Group), process, counts, ttl, l.now())
	return err
}
