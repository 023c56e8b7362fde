package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestPartitionsLsShowsEachPartitionsOwnerAndTheLiveMembers: partitions ls prints each
// partition of a partitioned stream (here laid out by hand: 2 partitions, the first
// leased to m1 with token 3 and holding 2 entries, one of them pending, and a dead
// letter; the second free) and the group's live members, as a table and as JSON; a name
// that is not a partitioned stream fails, naming it.
func TestPartitionsLsShowsEachPartitionsOwnerAndTheLiveMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var r [4]byte
	_, _ = rand.Read(r[:])
	name, group := "cli-"+hex.EncodeToString(r[:])+"-orders", "workers"
	p0, p1 := "{"+name+":0}", "{"+name+":1}"
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
