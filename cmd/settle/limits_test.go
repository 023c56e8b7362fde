package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/source"
)

// limitsOut is a mount line of stats --config --json, its limits only.
type limitsOut struct {
	Limits []struct {
		AtLimit       bool `json:"at_limit"`
		AtLimitValues []struct {
			InUse int    `json:"in_use"`
			Value string `json:"value"`
		} `json:"at_limit_values"`
		InUse       int     `json:"in_use"`
		Keys        int     `json:"keys"`
		KeysAtLimit int     `json:"keys_at_limit"`
		Limit       string  `json:"limit"`
		Rate        float64 `json:"rate"`
	} `json:"limits"`
	Mount string `json:"mount"`
}

// stats --config shows each flow limit the file declares for a mount: its rate, what
// is in use, and the key values at their limit, read from the state the engine's
// scripts keep (here taken by two deliveries of two accounts, as the gate takes it).
func TestStatsShowsEachFlowLimitOfAMountItsUseAndTheKeysAtTheirLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	store := redisbase.Limits{Client: b.rdb, Group: b.group, Key: b.in}
	for _, acct := range []string{"acct-1", "acct-2"} {
		gates := []source.Gate{
			{Name: "rate", Interval: 20 * time.Millisecond, Burst: 1},
			{Name: "slots", Slots: 1, Lease: time.Minute, Value: acct},
			{Name: "slots2", Slots: 5, Lease: time.Minute},
		}
		if _, err := store.LimitTake(b.ctx, gates, "token-"+acct, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	path := writeConfig(t, fmt.Sprintf(`{"mounts": [{"name": "payments", "kind": "stream", "key": %q, "group": %q, "limits": [
		{"kind": "rate", "n": 50, "per": "1s"}, {"kind": "concurrency-by", "n": 1}, {"kind": "global-concurrency", "n": 5}]}]}`, b.in, b.group))

	got := lines[limitsOut](t, b.ok(t, nil, "stats", "--config", path, "--json").stdout)
	if len(got) != 1 || len(got[0].Limits) != 3 {
		t.Fatalf("stats --config: %+v, want the mount payments with 3 limits", got)
	}
	rate, by, global := got[0].Limits[0], got[0].Limits[1], got[0].Limits[2]
	if rate.Limit != "RateLimit(50, 1s)" || rate.Rate != 50 {
		t.Errorf("the rate limit: %+v, want RateLimit(50, 1s) at 50/s", rate)
	}
	if by.Keys != 2 || by.KeysAtLimit != 2 || len(by.AtLimitValues) != 2 || by.AtLimitValues[0].Value != "acct-1" || by.AtLimitValues[1].Value != "acct-2" {
		t.Errorf("ConcurrencyBy(key, 1) held by acct-1 and acct-2: %+v", by)
	}
	if global.InUse != 2 || global.AtLimit {
		t.Errorf("GlobalConcurrency(5) with 2 held: %+v, want 2 in use, not at its limit", global)
	}
	human := b.ok(t, nil, "stats", "--config", path).stdout
	for _, want := range []string{"RateLimit(50, 1s)", "rate 50/s", "ConcurrencyBy(key, 1)", "2 keys, 2 at their limit: acct-1 (1), acct-2 (1)", "GlobalConcurrency(5)", "2 slots in use"} {
		if !strings.Contains(human, want) {
			t.Errorf("stats --config table does not say %q:\n%s", want, human)
		}
	}
}

// A flow limit the file gets wrong is refused naming the mount and the limit.
func TestConfigRefusesABadFlowLimitNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct{ limit, says string }{
		{`{"kind": "rate", "n": 50}`, "limit 1 (rate): per"},
		{`{"kind": "concurrency-by", "n": 0}`, "n is 0"},
		{`{"kind": "nope", "n": 1}`, `unknown kind "nope"`},
	} {
		path := writeConfig(t, fmt.Sprintf(`{"mounts": [{"name": "payments", "kind": "stream", "key": %q, "group": %q, "limits": [%s]}]}`, b.in, b.group, tt.limit))
		b.fails(t, exitError, []string{`mount "payments"`, tt.says}, "stats", "--config", path)
	}
}
