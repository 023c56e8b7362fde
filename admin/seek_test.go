package admin_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redistest"
)

func TestSeekTurnsAnIDADurationAgoOrATimeIntoTheGroupsNewPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.stuck(t, 3)
	now, err := b.r.Client.Time(b.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Hour).Truncate(time.Second)
	for _, tc := range []struct{ to, want string }{
		{ids[0], ids[0]},
		{"0", "0"},
		{"$", "$"},
		{at.UTC().Format(time.RFC3339), strconv.FormatInt(at.UnixMilli(), 10) + "-0"},
	} {
		res, err := b.insp.Seek(b.ctx, b.in, b.group, tc.to, admin.DryRun())
		if err != nil || res.To != tc.want || res.From != ids[2] || !res.DryRun {
			t.Errorf("Seek(%q) dry run = %+v, %v; want to %s from %s", tc.to, res, err, tc.want, ids[2])
		}
	}
	res, err := b.insp.Seek(b.ctx, b.in, b.group, "2h", admin.DryRun())
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(-2 * time.Hour); res.At.Before(want.Add(-time.Second)) || res.At.After(want.Add(waitBound)) {
		t.Errorf("Seek(2h) at %v, want two hours before Redis's %v", res.At, now)
	}

	for _, tc := range []struct {
		name, key, group, to string
		is                   error
		says                 string
	}{
		{"ToThatDoesNotParse", b.in, b.group, "yesterday", nil, `"yesterday"`},
		{"TimeInTheFuture", b.in, b.group, now.Add(time.Hour).UTC().Format(time.RFC3339), nil, "in the future"},
		{"NegativeDuration", b.in, b.group, "-2h", nil, "negative"},
		{"MissingGroup", b.in, "nobody", "0", admin.ErrGroupNotFound, "nobody"},
		{"MissingKey", b.r.Key("nothing"), b.group, "0", admin.ErrKeyNotFound, b.r.Key("nothing")},
	} {
		if _, err := b.insp.Seek(b.ctx, tc.key, tc.group, tc.to); err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !contains(err, tc.says) {
			t.Errorf("%s: Seek = %v, want an error (%v) saying %q", tc.name, err, tc.is, tc.says)
		}
	}
	if g := b.lastDelivered(t); g != ids[2] {
		t.Fatalf("a refused or dry seek moved the group to %s", g)
	}

	if !redistest.Real() {
		t.Skip("miniredis does not implement XGROUP SETID: the seek itself runs on real Redis (SETTLE_REDIS_URL)")
	}
	if _, err := b.insp.Seek(b.ctx, b.in, b.group, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.insp.Seek(b.ctx, b.in, b.group, ids[0]); err != nil {
		t.Fatalf("a second seek to the same id: %v", err)
	}
	if g := b.lastDelivered(t); g != ids[0] {
		t.Fatalf("group at %s after Seek(%s)", g, ids[0])
	}
	again := b.readNew(t)
	if len(again) != 2 || again[0] != ids[1] || again[1] != ids[2] {
		t.Fatalf("after Seek(%s) the group reads %v, want %v", ids[0], again, ids[1:])
	}
	if _, err := b.insp.Seek(b.ctx, b.in, b.group, "1h"); err != nil {
		t.Fatal(err)
	}
	if got := b.readNew(t); len(got) != 3 {
		t.Fatalf("after Seek(1h) the group reads %v, want all 3 entries again", got)
	}
}

func (b *testBundle) lastDelivered(t *testing.T) string {
	t.Helper()
	groups, err := b.r.Client.XInfoGroups(b.ctx, b.in).Result()
	if err != nil || len(groups) != 1 {
		t.Fatalf("xinfo groups: %v %v", groups, err)
	}
	return groups[0].LastDeliveredID
}

// readNew reads what the group has not been delivered yet, as consumer "again".
func (b *testBundle) readNew(t *testing.T) []string {
	t.Helper()
	s, err := b.r.Client.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "again", Streams: []string{b.in, ">"}, Count: 10, Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range s[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}
