package source

import (
	"context"
	"time"
)

// Limiter is the capability of a transport that keeps the state of a mount's flow
// limits (settle.RateLimit, RateLimitBy, ConcurrencyBy) beside its source, shared by
// every process that reads it: a Redis source in keys of its hash slot, each step one
// Lua script with "now" from Redis TIME (Env.TestClock under a test). The engine
// (internal/flow) decides; a Limiter only stores. A mount with a flow limit on a
// transport that is not a Limiter is refused at startup.
type Limiter interface {
	// LimitTake lets one delivery start under gates, holding its slots by token, all
	// or nothing: now, or at a start it reserves when its rate limits let it start
	// within horizon, or it says how long the delivery must wait before it asks again.
	LimitTake(ctx context.Context, gates []Gate, token string, horizon time.Duration) (Take, error)
	// LimitRenew extends the leases of held slots by lease and returns the indexes of
	// those whose lease had ended (lost: another delivery may hold them now).
	LimitRenew(ctx context.Context, held []Held, lease time.Duration) (lost []int, err error)
	// LimitRelease frees held slots, each only if its token still holds it.
	LimitRelease(ctx context.Context, held []Held) error
}

// Take is a LimitTake's answer.
type Take struct {
	// Reserved: the delivery took its place (its rate limits moved on, its slots
	// leased) and starts once Wait has passed, without asking again.
	Reserved bool
	// Wait is how long the delivery waits: 0, it starts now; else it starts then
	// (Reserved) or asks again then.
	Wait time.Duration
	// Which is the index of the gate that asks the wait (-1: none).
	Which int
}

// Gate is one limit a delivery must pass: a rate limit (Slots 0) or a concurrency
// limit, for one key value.
type Gate struct {
	// Burst is how many starts a rate limit lets through at once (at least 1).
	Burst int
	// Interval is a rate limit's emission interval: its period over its count.
	Interval time.Duration
	// Lease is how long a concurrency slot is held without a renewal.
	Lease time.Duration
	// Name tells the mount's limits apart in their keys ("rate", "rateby", "slots",
	// then "rateby2", … for a second limit of a kind).
	Name string
	// Slots, when positive, makes it a concurrency limit of that many slots.
	Slots int
	// Value is the key value the limit applies to ("" for a mount-wide limit).
	Value string
}

// Held is one concurrency slot a delivery holds.
type Held struct {
	// Name is the slot's limit's Name.
	Name string
	// Token is what the slot is held by, unique per start.
	Token string
	// Value is the key value of the slot's limit.
	Value string
}

// WaitReporter is the optional capability of a Limiter that records, beside the limits'
// state, how many deliveries each process has waiting for them, for operators
// (settle/admin). The gate reports now and then while something waits; without it,
// waits are seen only in the process (its metrics and log lines).
type WaitReporter interface {
	// LimitWaiting records process's counts of waiting deliveries, one per limit in the
	// order declared (all zero: none), held for ttl without another report.
	LimitWaiting(ctx context.Context, process string, counts []int, ttl time.Duration) error
}
