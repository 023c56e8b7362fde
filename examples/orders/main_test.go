package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

var summary = regexp.MustCompile(`^settled (\d+): in order (\d+), out of order (\d+), retried (\d+), members (\d+)$`)

// result is the last line's figures.
type result struct{ settled, inOrder, outOfOrder, retried, members int }

// runOrders runs the command with args and returns its last line's figures and its
// whole output.
func runOrders(t *testing.T, args ...string) (result, string) {
	t.Helper()
	var out, errs bytes.Buffer
	if err := run(context.Background(), args, &out, &errs); err != nil {
		t.Fatalf("run %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	m := summary.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q does not match %s", lines[len(lines)-1], summary)
	}
	n := make([]int, 6)
	for i := 1; i <= 5; i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	return result{n[1], n[2], n[3], n[4], n[5]}, out.String()
}

// checkInOrder fails unless every one of n events settled, in order, some after a
// retry in place.
func checkInOrder(t *testing.T, r result, n int, out string) {
	t.Helper()
	if r.settled != n || r.inOrder != n || r.outOfOrder != 0 {
		t.Fatalf("settled %d, in order %d, out of order %d: want %d, %d, 0\n%s", r.settled, r.inOrder, r.outOfOrder, n, n, out)
	}
	if r.retried == 0 {
		t.Fatalf("retried 0: want some events retried in place\n%s", out)
	}
}

// cleanup deletes the keys of a run on name at url (one DEL each: on a cluster they lie
// in several slots).
func cleanup(t *testing.T, rdb redis.UniversalClient, name string) {
	t.Cleanup(func() {
		defer rdb.Close()
		for _, k := range Keys(name) {
			rdb.Del(context.Background(), k)
		}
	})
}

func prefix(t *testing.T) string {
	return "orders-test-" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(t.Name(), "/", "-") + ":"
}

func TestOrdersKeepsEachCustomersEventsInOrderAcrossMembersAndAStop(t *testing.T) {
	t.Parallel()
	r, out := runOrders(t, "-lease", "1500ms")
	checkInOrder(t, r, 400, out)
	if r.members != 3 {
		t.Fatalf("members %d, want 3", r.members)
	}
	if !strings.Contains(out, "worker-3 stopped gracefully at ") {
		t.Fatalf("no member was stopped midway:\n%s", out)
	}
}

func TestOrdersOnRedisKeepsEachCustomersEventsInOrder(t *testing.T) {
	t.Parallel()
	url := os.Getenv("SETTLE_REDIS_URL")
	if url == "" {
		url = "redis://" + miniredis.RunT(t).Addr()
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	p := prefix(t)
	cleanup(t, redis.NewClient(opt), p+streamName)
	r, out := runOrders(t, "-redis", url, "-prefix", p, "-n", "240", "-customers", "24", "-lease", "1500ms")
	checkInOrder(t, r, 240, out)
}

func TestOrdersOnRedisClusterKeepsEachCustomersEventsInOrder(t *testing.T) {
	t.Parallel()
	addrs := os.Getenv("SETTLE_REDIS_CLUSTER")
	if addrs == "" {
		t.Skip("SETTLE_REDIS_CLUSTER is not set")
	}
	p := prefix(t)
	cleanup(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")}), p+streamName)
	r, out := runOrders(t, "-cluster", addrs, "-prefix", p, "-n", "240", "-customers", "24", "-lease", "1500ms")
	checkInOrder(t, r, 240, out)
}

// Without Ordered the same run lets a customer's later events by while an earlier one
// waits for its retry: the check must see it, or it proves nothing.
func TestOrdersWithoutOrderedIsCaughtOutOfOrder(t *testing.T) {
	t.Parallel()
	r, out := runOrders(t, "-unordered", "-stop=false", "-lease", "1500ms")
	if r.settled != 400 || r.outOfOrder == 0 || r.inOrder+r.outOfOrder != 400 {
		t.Fatalf("settled %d, in order %d, out of order %d: want 400 settled, some out of order\n%s", r.settled, r.inOrder, r.outOfOrder, out)
	}
}

func TestOrdersRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-n", "0"}, {"-customers", "0"}, {"-members", "0"}, {"-lease", "0s"},
		{"-redis", "redis://127.0.0.1:1", "-cluster", "127.0.0.1:1"}, {"-prefix", "{x}"}, {"extra"},
	} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, &out, &errs); err == nil {
			t.Errorf("run %v = nil error, want a refusal", args)
		}
	}
}
