package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/admin"
)

func TestDelaySetCountsOverdueMembersByRedisTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set := b.r.Key("delayed")
	now, err := b.r.Client.Time(b.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	members := []redis.Z{
		{Score: float64(ms - 5000), Member: "a"},
		{Score: float64(ms - 1000), Member: "b"},
		{Score: float64(ms + 60_000), Member: "c"},
	}
	if err := b.r.Client.ZAdd(b.ctx, set, members...).Err(); err != nil {
		t.Fatal(err)
	}

	info, err := b.insp.DelaySet(b.ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 3 || info.Overdue != 2 || !info.NextDue.Equal(time.UnixMilli(ms-5000)) {
		t.Fatalf("%+v, want 3 members, 2 overdue, next due 5 s before %v", info, now)
	}
	if info.OldestOverdue < 5*time.Second || info.OldestOverdue > 5*time.Second+waitBound || info.Now.Before(now.Truncate(time.Millisecond)) {
		t.Fatalf("OldestOverdue %s at %v, want 5 s past due by Redis's clock", info.OldestOverdue, info.Now)
	}

	t.Run("MissingKeyIsAnEmptySet", func(t *testing.T) {
		info, err := b.insp.DelaySet(b.ctx, b.r.Key("no-delays"))
		if err != nil || info.Size != 0 || info.Overdue != 0 || !info.NextDue.IsZero() {
			t.Fatalf("DelaySet of a missing key = %+v, %v; want empty", info, err)
		}
	})

	t.Run("WrongTypeIsRefused", func(t *testing.T) {
		if err := b.r.Client.XAdd(b.ctx, &redis.XAddArgs{Stream: b.in, Values: []any{"payload", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.insp.DelaySet(b.ctx, b.in); !errors.Is(err, admin.ErrWrongType) || !contains(err, b.in) {
			t.Fatalf("DelaySet of a stream = %v, want ErrWrongType naming it", err)
		}
	})
}
