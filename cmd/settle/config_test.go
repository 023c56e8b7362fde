package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// writeConfig writes conf to a config file of the test's own and returns its path.
func writeConfig(t *testing.T, conf string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "settle.json")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mountOut is a mount line of stats --config --json, as a script reads it.
type mountOut struct {
	DeadLetters *struct {
		Count int `json:"count"`
	} `json:"dead_letters"`
	DelaySet *struct {
		Overdue int `json:"overdue"`
		Size    int `json:"size"`
	} `json:"delay_set"`
	Key  string `json:"key"`
	Kind string `json:"kind"`
	List *struct {
		Length int64 `json:"length"`
	} `json:"list"`
	Mount     string `json:"mount"`
	MountKind string `json:"mount_kind"`
	Paused    bool   `json:"paused"`
	Stream    *struct {
		Group   string `json:"group"`
		Length  int64  `json:"length"`
		Paused  bool   `json:"paused"`
		Pending int64  `json:"pending"`
	} `json:"stream"`
}

// twoMounts makes the keys of two mounts (the payments stream with its dead letters
// and a delay set of two, one overdue; a list of three with no dead letter yet) and
// returns a config file naming them, and the list's key.
func (b *testBundle) twoMounts(t *testing.T) (path, jobs string) {
	t.Helper()
	b.deadLetters(t)
	delayed := b.key("payments.delayed")
	due := time.Now().Add(-time.Minute).UnixMilli()
	if err := b.rdb.ZAdd(b.ctx, delayed, redis.Z{Score: float64(due), Member: "m1"}, redis.Z{Score: float64(due + 3_600_000), Member: "m2"}).Err(); err != nil {
		t.Fatal(err)
	}
	jobs = b.key("jobs")
	pub := settle.NewPublisher(b.rdb)
	for id := range 3 {
		if err := pub.PublishList(b.ctx, jobs, payment{Card: "1111", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	path = writeConfig(t, fmt.Sprintf(`{"mounts": [
		{"name": "payments", "kind": "stream", "key": %q, "group": %q, "delayed": %q, "dead_letter": %q},
		{"name": "jobs", "kind": "list", "key": %q, "dead_letter": %q}]}`,
		b.in, b.group, delayed, b.dlq, jobs, b.key("jobs.dlq")))
	return path, jobs
}

func TestStatsWithConfigAndNoKeysReportsEveryMountWithExactCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, jobs := b.twoMounts(t)
	b.ok(t, nil, "pause", b.in, b.group)
	got := lines[mountOut](t, b.ok(t, nil, "stats", "--config", path, "--json").stdout)
	if len(got) != 2 {
		t.Fatalf("stats --config printed %d lines, want one per mount (2): %+v", len(got), got)
	}
	p, j := got[0], got[1]
	if p.Kind != kindMount || p.Mount != "payments" || p.MountKind != mountStream || p.Key != b.in ||
		p.Stream == nil || p.Stream.Group != b.group || p.Stream.Length != b.streamLen || p.Stream.Pending != 0 ||
		!p.Paused || !p.Stream.Paused || p.List != nil {
		t.Errorf("the stream mount: %+v (stream %+v), want %s group %s of %d, nothing pending, paused", p, p.Stream, b.in, b.group, b.streamLen)
	}
	if p.DelaySet == nil || p.DelaySet.Size != 2 || p.DelaySet.Overdue != 1 {
		t.Errorf("the stream mount's delay set: %+v, want size 2, overdue 1", p.DelaySet)
	}
	if p.DeadLetters == nil || p.DeadLetters.Count != deadTotal {
		t.Errorf("the stream mount's dead letters: %+v, want %d", p.DeadLetters, deadTotal)
	}
	if j.Mount != "jobs" || j.MountKind != mountList || j.Key != jobs || j.List == nil || j.List.Length != 3 || j.Paused || j.Stream != nil {
		t.Errorf("the list mount: %+v (list %+v), want %s of 3, not paused", j, j.List, jobs)
	}
	if j.DelaySet != nil || j.DeadLetters == nil || j.DeadLetters.Count != 0 {
		t.Errorf("the list mount: delay set %+v, dead letters %+v; want no delay set, a dead letter of 0 (its key is missing)", j.DelaySet, j.DeadLetters)
	}
	human := b.ok(t, nil, "stats", "--config", path).stdout
	for _, want := range []string{"payments", "jobs", "dead letters", "delay set", "paused"} {
		if !strings.Contains(human, want) {
			t.Errorf("stats --config table does not say %q:\n%s", want, human)
		}
	}
}

func TestStatsMountSelectsOneMountOfTheConfigAndAnUnknownOneIsRefusedNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	path, jobs := b.twoMounts(t)
	got := lines[mountOut](t, b.ok(t, nil, "stats", "--config", path, "--mount", "jobs", "--json").stdout)
	if len(got) != 1 || got[0].Mount != "jobs" || got[0].Key != jobs || got[0].List == nil || got[0].List.Length != 3 {
		t.Errorf("stats --mount jobs: %+v, want the one mount jobs, a list of 3", got)
	}
	b.fails(t, exitError, []string{`"nope"`, "jobs, payments"}, "stats", "--config", path, "--mount", "nope")
	b.fails(t, exitUsage, []string{"--mount"}, "stats", "--config", path, "--mount", "jobs", b.in)
	// The argument form still works beside --config.
	keys := lines[stat](t, b.ok(t, nil, "stats", "--config", path, b.dlq, "--json").stdout)
	if len(keys) != 1 || keys[0].Kind != kindDeadLetters {
		t.Errorf("stats --config with a key: %+v, want the key only, as dead letters", keys)
	}
}

// stat is a line of stats KEY --json.
type stat struct {
	Key  string `json:"key"`
	Kind string `json:"kind"`
}

func TestConfigNamingAnUnknownKindOrAMountWithoutItsKeyExitsWith1NamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		name   string
		mounts string
		says   []string
	}{
		{"UnknownKind", `{"name": "refunds", "kind": "queue", "key": "{r}"}`, []string{`mount "refunds"`, `unknown kind "queue"`, "reliable-list"}},
		{"NoKind", `{"name": "refunds", "key": "{r}"}`, []string{`mount "refunds"`, `unknown kind ""`}},
		{"NoKey", `{"name": "refunds", "kind": "stream", "group": "g"}`, []string{`mount "refunds" has no key`}},
		{"NoKeyNoName", `{"kind": "list"}, {"kind": "list"}`, []string{`mount 1 has no key`}},
		{"StreamWithoutGroup", `{"name": "refunds", "kind": "claiming-stream", "key": "{r}"}`, []string{`mount "refunds"`, "needs its consumer group"}},
		{"ListWithGroup", `{"name": "jobs", "kind": "reliable-list", "key": "{j}", "group": "g"}`, []string{`mount "jobs"`, "has no consumer group"}},
		{"TwoOfOneName", `{"kind": "list", "key": "{j}"}, {"name": "{j}", "kind": "list", "key": "{k}"}`, []string{`two mounts are named "{j}"`}},
		{"UnknownField", `{"name": "jobs", "kind": "list", "key": "{j}", "dead-letter": "{j}.dlq"}`, []string{`unknown field "dead-letter"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, `{"mounts": [`+tt.mounts+`]}`)
			r := b.fails(t, exitError, append([]string{path}, tt.says...), "stats", "--config", path, "--json")
			if r.stdout != "" {
				t.Errorf("a refused config printed %q", r.stdout)
			}
			// Every command that reads the file refuses it the same way.
			b.fails(t, exitError, tt.says, "dlq", "ls", b.dlq, "--config", path)
		})
	}
}

func TestConfigRedisIsUsedOnlyWhenNeitherTheFlagNorTheEnvironmentNamesOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	mounts := fmt.Sprintf(`"mounts": [{"name": "payments", "kind": "stream", "key": %q, "group": %q}]`, b.in, b.group)
	good := writeConfig(t, fmt.Sprintf(`{"redis": %q, %s}`, b.url, mounts))
	nowhere := "redis://127.0.0.1:1/0" // nothing listens on port 1
	bad := writeConfig(t, fmt.Sprintf(`{"redis": %q, %s}`, nowhere, mounts))
	noEnv := []string{EnvRedisURL + "=", EnvRedisCluster + "="}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
	}{
		{"FileWhenNothingElse", noEnv, []string{"--config", good}},
		{"FlagOverFile", noEnv, []string{"--config", bad, "--redis", b.url}},
		{"EnvironmentOverFile", []string{EnvRedisURL + "=" + b.url, EnvRedisCluster + "="}, []string{"--config", bad}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runSettle(t, tt.env, nil, append(tt.args, "stats", "--json")...)
			if r.code != exitOK {
				t.Fatalf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
			}
			if got := lines[mountOut](t, r.stdout); len(got) != 1 || got[0].Stream == nil || got[0].Stream.Group != b.group {
				t.Errorf("stats: %+v, want the mount payments", got)
			}
		})
	}
	expectFail(t, runSettle(t, noEnv, nil, "--config", bad, "stats"), exitError, "the redis of "+bad, "127.0.0.1:1")
}

func TestPendingLsAndListLsShowPausedAfterSettlePause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	jobs := b.key("jobs")
	if err := settle.NewPublisher(b.rdb).PublishList(b.ctx, jobs, payment{Card: "1111", ID: 1}); err != nil {
		t.Fatal(err)
	}
	type pausedOut struct {
		Paused bool `json:"paused"`
	}
	for _, tt := range []struct {
		name string
		ls   []string
		key  []string
	}{
		{"PendingLs", []string{"pending", "ls", b.in, b.group}, []string{b.in, b.group}},
		{"ListLs", []string{"list", "ls", jobs}, []string{jobs}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out pausedOut
			decode(t, b.ok(t, nil, append(tt.ls, "--json")...).stdout, &out)
			if out.Paused {
				t.Fatalf("%s before pause: paused", strings.Join(tt.ls, " "))
			}
			if human := b.ok(t, nil, tt.ls...).stdout; strings.Contains(human, "paused") {
				t.Errorf("%s before pause says paused:\n%s", strings.Join(tt.ls, " "), human)
			}
			b.ok(t, nil, append([]string{"pause"}, tt.key...)...)
			decode(t, b.ok(t, nil, append(tt.ls, "--json")...).stdout, &out)
			if !out.Paused {
				t.Errorf("%s --json after settle pause: paused false, want true", strings.Join(tt.ls, " "))
			}
			if human := b.ok(t, nil, tt.ls...).stdout; !strings.Contains(human, "paused") {
				t.Errorf("%s after pause does not say paused:\n%s", strings.Join(tt.ls, " "), human)
			}
			b.ok(t, nil, append([]string{"resume"}, tt.key...)...)
			decode(t, b.ok(t, nil, append(tt.ls, "--json")...).stdout, &out)
			if out.Paused {
				t.Errorf("%s --json after settle resume: paused true, want false", strings.Join(tt.ls, " "))
			}
		})
	}
}

func TestInboxViewAndStatsWithConfigShowAPausedGroup(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, sb sqlBackend) {
		x := setupSQL(t, sb)
		x.deadRows(t)
		b := setup(t)
		if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		path := writeConfig(t, fmt.Sprintf(`{"dsn": %q,
			"mounts": [{"name": "payments", "kind": "stream", "key": %q, "group": %q}],
			"inboxes": [{"name": "mailer", "table": {"name": %q, "group": "name", "attempt": "attempt",
				"retry_after": "retry_after", "last_error": "last_error", "dead_at": "dead_at"},
			 "groups": [%q], "dead": [%q]}]}`, x.dsn, b.in, b.group, x.table, groupEmails, groupDead))
		type view struct {
			Dead   *int64 `json:"dead"`
			Group  string `json:"group"`
			Inbox  string `json:"inbox"`
			Kind   string `json:"kind"`
			Mount  string `json:"mount"`
			Paused *bool  `json:"paused"`
		}
		var v view
		decode(t, x.ok(t, "--json", "view", groupEmails).stdout, &v)
		if v.Paused == nil || *v.Paused {
			t.Fatalf("inbox view before Pause: paused %v, want false", v.Paused)
		}
		if err := x.ib.Pause(context.Background(), groupEmails); err != nil {
			t.Fatal(err)
		}
		decode(t, x.ok(t, "--json", "view", groupEmails).stdout, &v)
		if v.Paused == nil || !*v.Paused {
			t.Errorf("inbox view after Pause: paused %v, want true", v.Paused)
		}
		if human := x.ok(t, "view", groupEmails).stdout; !strings.Contains(human, "PAUSED") || !strings.Contains(human, "yes") {
			t.Errorf("inbox view table after Pause:\n%s", human)
		}
		got := lines[view](t, b.ok(t, nil, "stats", "--config", path, "--json").stdout)
		if len(got) != 3 || got[0].Kind != kindMount || got[0].Mount != "payments" ||
			got[1].Kind != kindGroup || got[1].Inbox != "mailer" || got[1].Group != groupEmails || got[1].Paused == nil || !*got[1].Paused ||
			got[2].Kind != kindDeadLetter || got[2].Inbox != "mailer" || got[2].Dead == nil || *got[2].Dead != deadRows {
			t.Errorf("stats --config: %+v, want the mount payments, the paused group %s of mailer, its %d dead rows", got, groupEmails, deadRows)
		}
		if got := lines[view](t, b.ok(t, nil, "stats", "--config", path, "--mount", "payments", "--json").stdout); len(got) != 1 {
			t.Errorf("stats --mount payments: %+v, want the mount only", got)
		}
	})
}

// TestStatsWithConfigShowsEveryMountItCanAndMarksTheOnesItCannotRead: a mount whose
// group does not exist is marked UNREADABLE with why; the others are shown; exit 1.
func TestStatsWithConfigShowsEveryMountItCanAndMarksTheOnesItCannotRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, jobs := b.twoMounts(t)
	path := writeConfig(t, fmt.Sprintf(`{"mounts": [
		{"name": "broken", "kind": "stream", "key": %q, "group": "no-such-group"},
		{"name": "jobs", "kind": "list", "key": %q}]}`, b.in, jobs))
	r := b.settle(t, nil, "stats", "--config", path)
	if r.code != exitError || !strings.Contains(r.stdout, "UNREADABLE") || !strings.Contains(r.stdout, "jobs") ||
		!strings.Contains(r.stderr, "1 of the 2 mounts could not be read: broken") {
		t.Fatalf("stats --config with a broken mount = exit %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
