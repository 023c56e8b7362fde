package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// findOut is the JSON of settle find, as a script reads it.
type findOut struct {
	Limited bool     `json:"limited"`
	Origins []string `json:"origins"`
	Places  []struct {
		ID         string `json:"id"`
		Key        string `json:"key"`
		Kind       string `json:"kind"`
		Mount      string `json:"mount"`
		OriginID   string `json:"origin_id"`
		Reason     string `json:"reason"`
		RetryCount int    `json:"retry_count"`
	} `json:"places"`
	Scanned []struct {
		Complete bool   `json:"complete"`
		Key      string `json:"key"`
		Read     int    `json:"read"`
	} `json:"scanned"`
}

// placesOf is the places of out as "kind@key".
func placesOf(out findOut) string {
	var ps []string
	for _, p := range out.Places {
		ps = append(ps, p.Kind+"@"+p.Key)
	}
	return strings.Join(ps, " ")
}

func TestFindByOriginIDShowsTheCopiesInTheStreamAndTheDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	dls, err := b.rdb.XRangeN(b.ctx, b.dlq, "-", "+", 1).Result()
	if err != nil || len(dls) != 1 {
		t.Fatalf("xrange %s: %v, %v", b.dlq, dls, err)
	}
	origin, _ := dls[0].Values[settle.HeaderOriginID].(string)
	if origin == "" {
		t.Fatalf("the dead letter %v carries no origin id", dls[0].Values)
	}
	want := fmt.Sprintf("settled@%s settled@%s dead-letter@%s", b.in, b.in, b.dlq)

	r := b.ok(t, nil, "--json", "find", origin, "--stream", b.in, "--group", b.group, "--dead-letter", b.dlq)
	var out findOut
	decode(t, r.stdout, &out)
	if got := placesOf(out); got != want {
		t.Fatalf("settle find %s: places %s, want %s (the first delivery, its retry copy, its dead letter)", origin, got, want)
	}
	if out.Places[0].ID != origin || out.Places[1].RetryCount != 1 || out.Places[2].RetryCount != 2 || !strings.Contains(out.Places[2].Reason, "2 of 2") {
		t.Fatalf("places %+v: want the origin, retry count 1, the dead letter at 2 of 2", out.Places)
	}
	if len(out.Scanned) != 2 || !out.Scanned[0].Complete || out.Scanned[0].Read == 0 {
		t.Fatalf("scanned %+v: want the stream and the dead letter read whole from the origin's time", out.Scanned)
	}

	// The same from the config's mounts, for a person: each place and what was read.
	// A reply to the first delivery, in the mount's reply stream, is found too.
	replies := b.key("replies")
	if err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: replies, Values: map[string]any{settle.HeaderReplyOf: origin, "payload": "ok"}}).Err(); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, fmt.Sprintf(`{"mounts": [{"name": "payments", "kind": "stream", "key": %q, "group": %q, "dead_letter": %q, "replies": [%q]}]}`, b.in, b.group, b.dlq, replies))
	r = b.ok(t, nil, "--config", path, "find", dls[0].ID)
	for _, s := range []string{"4 places of " + origin, "settled", "dead-letter", "payments", "max attempts reached", "reply to " + origin, "read:", "all of it"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("settle find by the dead letter's id: output does not say %q:\n%s", s, r.stdout)
		}
	}
}

func TestFindRefusesAQueryItCannotReadOrNoPlaceToLook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fails(t, exitUsage, []string{"name=value"}, "find", "not an id", "--stream", b.in)
	b.fails(t, exitUsage, []string{"--config"}, "find", "1-1")
	b.fails(t, exitUsage, []string{"--since"}, "find", "1-1", "--stream", b.in, "--since", "yesterday")
}
