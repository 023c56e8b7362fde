package script_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// TestADelaySetsExpiryOnlyGrowsWhateverTheOrderOfItsWriters: two writers of one delay set
// with different TTLs (a mount's park, a producer's delayed publish), in each order: the
// set lives as long as the longer TTL asks, and for ever when either asks for no expiry.
func TestADelaySetsExpiryOnlyGrowsWhateverTheOrderOfItsWriters(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	stream := r.Key("in")
	if err := r.Client.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	b := &moveBundle{ctx: ctx, r: r, stream: stream}
	writers := map[string]func(t *testing.T, set string, ttl time.Duration){
		"park": func(t *testing.T, set string, ttl time.Duration) {
			if _, err := script.Park(ctx, r.Client, set, stream, "g", "c", b.pending(t), "m-park", time.Second, ttl, -1); err != nil {
				t.Fatal(err)
			}
		},
		"value park": func(t *testing.T, set string, ttl time.Duration) {
			if _, _, err := script.ParkValue(ctx, r.Client, set, "", "", "m-value", time.Second, ttl, -1); err != nil {
				t.Fatal(err)
			}
		},
		"delayed publish": func(t *testing.T, set string, ttl time.Duration) {
			if _, err := script.DelayPublish(ctx, r.Client, set, "", "", "m-publish", time.Second, -1, ttl); err != nil {
				t.Fatal(err)
			}
		},
	}
	// want: the least PTTL the set may have after both writes (ms), or -1 for no expiry.
	pairs := []struct {
		first, second time.Duration
		want          time.Duration
	}{
		{time.Hour, 3 * time.Second, time.Hour},
		{3 * time.Second, time.Hour, time.Hour},
		{0, 3 * time.Second, -1},
		{3 * time.Second, 0, -1},
		{0, 0, -1},
	}
	n := 0
	for first, w1 := range writers {
		for second, w2 := range writers {
			for _, p := range pairs {
				n++
				name := fmt.Sprintf("%s %s then %s %s", first, ttlName(p.first), second, ttlName(p.second))
				t.Run(name, func(t *testing.T) {
					set := r.Key(fmt.Sprintf("delayed-%d", n))
					w1(t, set, p.first)
					w2(t, set, p.second)
					left, err := r.Client.PTTL(ctx, set).Result()
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case p.want < 0 && left != -1:
						t.Fatalf("the set's PTTL is %s; want no expiry", left)
					case p.want > 0 && (left < p.want-time.Minute || left > p.want):
						t.Fatalf("the set's PTTL is %s; want about %s (the longer TTL)", left, p.want)
					}
				})
			}
		}
	}
}

func ttlName(d time.Duration) string {
	if d == 0 {
		return "without TTL"
	}
	return "TTL " + d.String()
}
