package admin_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// Length counts a stream's entries and a list's items, a missing key as none, and
// refuses a key of another type naming it.
func TestLengthCountsStreamsAndListsAndRefusesOtherTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rdb := b.r.Client
	for range 3 {
		rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.dlq, Values: map[string]any{"payload": "x"}})
	}
	list, other := b.r.Key("list"), b.r.Key("str")
	rdb.RPush(b.ctx, list, "a", "b")
	rdb.Set(b.ctx, other, "v", 0)
	for key, want := range map[string]int64{b.dlq: 3, list: 2, b.r.Key("missing"): 0} {
		if n, err := b.insp.Length(b.ctx, key); err != nil || n != want {
			t.Fatalf("Length(%s) = %d, %v; want %d", key, n, err, want)
		}
	}
	if _, err := b.insp.Length(b.ctx, other); !errors.Is(err, admin.ErrWrongType) {
		t.Fatalf("Length(%s) of a string: %v, want ErrWrongType", other, err)
	}
}

// A replay drops settle's headers but keeps those a hook added (a tracer's link to the
// dead letter's span), so the replayed message's first delivery can link back.
func TestReplayKeepsTheHeadersHooksAdded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	link := settle.HeaderHookPrefix + "otel-link"
	b.r.Client.XGroupCreateMkStream(b.ctx, b.in, b.group, "$") // the source exists
	b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.dlq, Values: map[string]any{
		"payload": "x", settle.HeaderDeadSource: b.in, settle.HeaderRetryCount: "5", link: "00-abc", "tenant": "acme",
	}})
	if _, err := b.insp.Replay(b.ctx, b.dlq, admin.Filter{}); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.r.Client.XRange(b.ctx, b.in, "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("replayed %v, %v; want one entry", msgs, err)
	}
	v := msgs[0].Values
	if v[link] != "00-abc" || v["tenant"] != "acme" || v[settle.HeaderRetryCount] != nil {
		t.Fatalf("replayed entry %v: want %s and tenant kept, the retry count dropped", v, link)
	}
}
