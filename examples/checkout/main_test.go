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

var summary = regexp.MustCompile(`^settled (\d+): paid (\d+), dropped (\d+), dead-lettered (\d+), replies (\d+)$`)

// runCheckout runs the command with args and checks its last line's arithmetic: every
// order settled once (P + D + X = N) and every paid order's reply recorded (R = P).
func runCheckout(t *testing.T, args ...string) (paid, dropped, dead int) {
	t.Helper()
	var out, errs bytes.Buffer
	if err := run(context.Background(), args, &out, &errs); err != nil {
		t.Fatalf("run %v: %v\nstderr:\n%s", args, err, errs.String())
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
	if n[2]+n[3]+n[4] != n[1] || n[5] != n[2] {
		t.Fatalf("last line %q: want paid + dropped + dead-lettered = settled and replies = paid", m[0])
	}
	return n[2], n[3], n[4]
}

func TestCheckoutOnTheBrokerPaysDropsAndDeadLettersEveryOrderOnce(t *testing.T) {
	t.Parallel()
	p, d, x := runCheckout(t, "-n", "200", "-backoff", "5ms")
	if p == 0 || d == 0 || x == 0 {
		t.Fatalf("paid %d, dropped %d, dead-lettered %d: want each path taken with 200 orders", p, d, x)
	}
}

func TestCheckoutOnRedisMatchesTheBrokerAndKeepsOneReplyPerPaidOrder(t *testing.T) {
	t.Parallel()
	url := os.Getenv("SETTLE_REDIS_URL")
	if url == "" {
		url = "redis://" + miniredis.RunT(t).Addr()
	}
	// The same seed settles the same orders the same way on either store; run checks
	// that the reply stream holds exactly the replies recorded.
	p1, d1, x1 := runCheckout(t, "-n", "60", "-backoff", "5ms", "-seed", "9")
	prefix := "checkout-test-" + strconv.Itoa(os.Getpid()) + ":"
	t.Cleanup(func() {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		tag := prefix + "{shop}:"
		rdb.Del(context.Background(), tag+topicRequested, tag+topicPaid, tag+topicDead)
	})
	p2, d2, x2 := runCheckout(t, "-n", "60", "-backoff", "5ms", "-seed", "9", "-redis", url, "-prefix", prefix)
	if p1 != p2 || d1 != d2 || x1 != x2 {
		t.Fatalf("broker: paid %d dropped %d dead %d; redis: paid %d dropped %d dead %d", p1, d1, x1, p2, d2, x2)
	}
}

func TestCheckoutRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-n", "0"}, {"-backoff", "0s"}, {"extra"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, &out, &errs); err == nil {
			t.Errorf("run %v = nil error, want a refusal", args)
		}
	}
}
