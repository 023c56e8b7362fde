package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// partitionedLayout lays a partitioned stream out by hand, as its members would: 2
// partitions, the first leased to m1 with token 3 and holding 2 entries, one of them
// pending, and a dead letter in its copy of orders.dlq; the second free; m1 the group
// workers' one live member. It returns the stream's name and the partitions' keys.
func (b *testBundle) partitionedLayout(t *testing.T) (name, group, p0, p1 string) {
	t.Helper()
	ctx := context.Background()
	var r [4]byte
	_, _ = rand.Read(r[:])
	name, group = "cli-"+hex.EncodeToString(r[:])+"-orders", "workers"
	p0, p1 = "{"+name+":0}", "{"+name+":1}"
	lease0, members, dead0 := p0+":lease:"+group, "{"+name+"}:members:"+group, p0+":orders.dlq"
	t.Cleanup(func() { _ = b.rdb.Del(context.Background(), name, p0, p1, lease0, members, dead0).Err() })
	now, err := b.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	until := strconv.FormatInt(now.UnixMilli()+60_000, 10)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.rdb.HSet(ctx, name, "partitions", "2", "hash", "fnv1a32").Err())
	must(b.rdb.HSet(ctx, lease0, "owner", "m1", "token", "3", "until", until).Err())
	must(b.rdb.ZAdd(ctx, members, redis.Z{Score: float64(now.UnixMilli() + 60_000), Member: "m1"}).Err())
	for _, k := range []string{p0, p1} {
		must(b.rdb.XGroupCreateMkStream(ctx, k, group, "$").Err())
	}
	for range 2 {
		must(b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: p0, Values: []any{"payload", "x"}}).Err())
	}
	must(b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "m1", Streams: []string{p0, ">"}, Count: 1, Block: -1}).Err())
	must(b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: dead0, Values: []any{"payload", "x"}}).Err())
	return name, group, p0, p1
}

// TestPartitionsLsShowsEachPartitionsOwnerAndTheLiveMembers: partitions ls prints each
// partition of a partitioned stream (here laid out by hand: 2 partitions, the first
// leased to m1 with token 3 and holding 2 entries, one of them pending, and a dead
// letter; the second free) and the group's live members, as a table and as JSON; a name
// that is not a partitioned stream fails, naming it.
func TestPartitionsLsShowsEachPartitionsOwnerAndTheLiveMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name, group, p0, _ := b.partitionedLayout(t)
	out := b.ok(t, nil, "partitions", "ls", name, group, "--dead-letter", "orders.dlq").stdout
	rows := strings.Split(out, "\n")
	if len(rows) < 7 || !strings.HasPrefix(rows[0], "PARTITION") {
		t.Fatalf("partitions ls printed:\n%s\nwant a header, 2 partitions, then the members", out)
	}
	if f := strings.Fields(rows[1]); len(f) != 9 || f[0] != "0" || f[1] != p0 || f[2] != "m1" || f[4] != "3" || f[5] != "2" || f[7] != "1" || f[8] != "1" {
		t.Fatalf("partition 0's row %q, want 0 %s m1 <lease> 3 2 <lag> 1 1 (held by m1, token 3, 2 entries, 1 pending, 1 dead letter)", rows[1], p0)
	}
	if f := strings.Fields(rows[2]); len(f) != 9 || f[0] != "1" || f[2] != "(none)" || f[5] != "0" {
		t.Fatalf("partition 1's row %q, want no owner and nothing held", rows[2])
	}
	if !strings.Contains(out, "1 live members of group workers (hash fnv1a32)") || !strings.Contains(out, "\nm1 ") {
		t.Fatalf("partitions ls printed:\n%s\nwant m1 as the one live member", out)
	}

	type line struct {
		Index  *int   `json:"index"`
		Owner  string `json:"owner"`
		Member string `json:"member"`
		Owns   int    `json:"owns"`
	}
	ls := lines[line](t, b.ok(t, nil, "partitions", "ls", name, group, "--json").stdout)
	if len(ls) != 3 || ls[0].Index == nil || *ls[0].Index != 0 || ls[0].Owner != "m1" || ls[1].Owner != "" || ls[2].Member != "m1" || ls[2].Owns != 1 {
		t.Fatalf("partitions ls --json: %+v, want partition 0 held by m1, partition 1 free, then member m1 holding 1", ls)
	}

	b.fails(t, exitError, []string{"partitioned stream", name + "-missing", "does not exist"}, "partitions", "ls", name+"-missing", group)
}

// TestStatsShowsAPartitionedStreamsPartitionsAndMembers: stats --config shows a mount of
// kind partitioned-stream as its group, a line per partition (owner, lease, token,
// length, lag, pending, dead letters counted in the dead_letter named) and a line per
// live member (how many partitions it holds), as a table and as JSON; stats NAME --group
// reads the meta key as a partitioned stream too; a partitioned-stream mount naming a
// delay set is refused.
func TestStatsShowsAPartitionedStreamsPartitionsAndMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name, group, p0, p1 := b.partitionedLayout(t)
	path := writeConfig(t, fmt.Sprintf(`{"mounts": [{"name": "orders", "kind": "partitioned-stream", "key": %q, "group": %q, "dead_letter": "orders.dlq"}]}`, name, group))

	out := b.ok(t, nil, "stats", "--config", path).stdout
	for _, want := range []string{
		"orders  " + name + "  partitioned stream  2  group workers: 2 partitions, 1 held, 1 live members",
		p0 + "  partition 0  2  owner m1 (lease left ",
		"token 3): lag ", "pending 1, dead letters 1",
		p1 + "  partition 1  0  no owner: lag ",
		"orders  m1  member  1  holds 1 partitions, heartbeat left ",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("stats --config does not say %q:\n%s", want, out)
		}
	}

	type partition struct {
		DeadLetters int64  `json:"dead_letters"`
		Owner       string `json:"owner"`
		Pending     int64  `json:"pending"`
		Token       string `json:"token"`
	}
	type mount struct {
		MountKind   string `json:"mount_kind"`
		Partitioned *struct {
			Members []struct {
				Member string `json:"member"`
				Owns   int    `json:"owns"`
			} `json:"members"`
			Partitions []partition `json:"partitions"`
		} `json:"partitioned"`
	}
	got := lines[mount](t, b.ok(t, nil, "stats", "--config", path, "--json").stdout)
	if len(got) != 1 || got[0].MountKind != "partitioned-stream" || got[0].Partitioned == nil {
		t.Fatalf("stats --config --json: %+v, want the one partitioned-stream mount", got)
	}
	ps := got[0].Partitioned
	if len(ps.Partitions) != 2 || ps.Partitions[0] != (partition{DeadLetters: 1, Owner: "m1", Pending: 1, Token: "3"}) || ps.Partitions[1].Owner != "" {
		t.Errorf("partitions %+v, want partition 0 held by m1 (token 3, 1 pending, 1 dead letter), partition 1 free", ps.Partitions)
	}
	if len(ps.Members) != 1 || ps.Members[0].Member != "m1" || ps.Members[0].Owns != 1 {
		t.Errorf("members %+v, want m1 holding 1", ps.Members)
	}

	byKey := b.ok(t, nil, "stats", name, "--group", group).stdout
	if !strings.Contains(byKey, "partitioned stream") || !strings.Contains(byKey, "owner m1") || strings.Contains(byKey, "dead letters") {
		t.Errorf("stats NAME --group does not show the partitioned stream (its dead letters unnamed, so not counted):\n%s", byKey)
	}

	bad := writeConfig(t, fmt.Sprintf(`{"mounts": [{"kind": "partitioned-stream", "key": %q, "group": "g", "delayed": "d"}]}`, name))
	b.fails(t, exitError, []string{bad, "partitioned-stream", "delayed"}, "stats", "--config", bad)
}

// TestWebShowsAPartitionedStreamMountOnItsOwnPage: settle web serves a mount of kind
// partitioned-stream of --config on the console's partitioned stream page, its
// partitions' owner and dead letters as stats counts them.
func TestWebShowsAPartitionedStreamMountOnItsOwnPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name, group, _, _ := b.partitionedLayout(t)
	path := writeConfig(t, fmt.Sprintf(`{"mounts": [{"name": "orders", "kind": "partitioned-stream", "key": %q, "group": %q, "dead_letter": "orders.dlq"}]}`, name, group))
	u := startWeb(t, b, "--config", path, "--read-only")
	resp, err := http.Get(u + "partitioned/orders")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<tr data-partition="0">`) ||
		!strings.Contains(string(body), `data-owner="m1"`) || !strings.Contains(string(body), `data-dead="1"`) {
		t.Fatalf("GET %spartitioned/orders = %d, want partition 0 held by m1 with its dead letter:\n%s", u, resp.StatusCode, body)
	}
}
