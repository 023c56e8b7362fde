package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/sourcetest"
)

// A pause written by the Inspector is the pause a running mount reads: a Stream mount
// started paused handles nothing published, the stream's view says Paused, and after
// Resume the mount handles it.
func TestPauseHoldsARunningMountAndResumeReleasesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.r.Client.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.insp.Pause(b.ctx, b.in, b.group); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	handled := make(chan struct{}, 1)
	s := &sourcetest.Subject{Source: settle.Stream(b.r.Client, b.in, b.group, settle.Block(50*time.Millisecond))}
	run := sourcetest.Start(t, s, settle.HandlerFunc(func(context.Context, *settle.Message) error {
		handled <- struct{}{}
		return nil
	}))
	if _, err := settle.NewPublisher(b.r.Client).PublishBytes(b.ctx, b.in, []byte("later")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
		t.Fatal("a paused mount handled a message")
	case <-time.After(1500 * time.Millisecond): // a bounded negative: past one pause check
	}
	info, err := b.insp.Stream(b.ctx, b.in, b.group)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Paused || info.Length != 1 || info.Pending != 0 {
		t.Fatalf("the paused group's view: Paused %v, Length %d, Pending %d; want true, 1, 0", info.Paused, info.Length, info.Pending)
	}

	if err := b.insp.Resume(b.ctx, b.in, b.group); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case <-handled:
	case <-time.After(waitBound):
		t.Fatalf("the resumed mount did not handle the message within %s", waitBound)
	}
	run.Stop(t)
	if info, err := b.insp.Stream(b.ctx, b.in, b.group); err != nil || info.Paused {
		t.Fatalf("after Resume the view says Paused %v (err %v), want false", info != nil && info.Paused, err)
	}
}

// Pause and Resume are safe to run twice, touch only the control key, and Paused reads
// it; a list (empty or not) takes no group.
func TestPauseAndResumeAreIdempotentAndPausedReadsTheControlKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.r.Client.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	list, empty := b.r.Key("jobs"), b.r.Key("drained")
	if err := b.r.Client.RPush(b.ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, key, group string }{
		{"StreamGroup", b.in, b.group},
		{"List", list, ""},
		{"EmptyList", empty, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			paused := func(want bool) {
				t.Helper()
				got, err := b.insp.Paused(b.ctx, tt.key, tt.group)
				if err != nil || got != want {
					t.Fatalf("Paused(%q, %q) = %v, %v; want %v", tt.key, tt.group, got, err, want)
				}
			}
			paused(false)
			for range 2 {
				if err := b.insp.Pause(b.ctx, tt.key, tt.group); err != nil {
					t.Fatalf("Pause: %v", err)
				}
			}
			paused(true)
			if n, err := b.r.Client.Exists(b.ctx, admin.ControlKey(tt.key, tt.group)).Result(); err != nil || n != 1 {
				t.Fatalf("control key %q: exists %d, %v", admin.ControlKey(tt.key, tt.group), n, err)
			}
			for range 2 {
				if err := b.insp.Resume(b.ctx, tt.key, tt.group); err != nil {
					t.Fatalf("Resume: %v", err)
				}
			}
			paused(false)
		})
	}
	if n, _ := b.r.Client.LLen(b.ctx, list).Result(); n != 1 {
		t.Fatalf("the list holds %d items after pause and resume, want its 1 untouched", n)
	}
}

// Bad input is refused with an error that names it, and no control key is written.
func TestPauseRefusesBadInputNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.r.Client.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	zset, list, missing, channel := b.r.Key("delayed"), b.r.Key("jobs"), b.r.Key("missing"), b.r.Key("events")
	if err := b.r.Client.ZAdd(b.ctx, zset, redis.Z{Score: 1, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.r.Client.RPush(b.ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	sub := b.r.Client.Subscribe(b.ctx, channel)
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, key, group string
		target           error // nil: any error
		names            string
	}{
		{"StreamWithoutGroup", b.in, "", nil, b.in},
		{"MissingGroup", b.in, "nobody", admin.ErrGroupNotFound, "nobody"},
		{"WrongType", zset, "", admin.ErrWrongType, zset},
		{"ListWithGroup", list, "g", nil, list},
		{"MissingStream", missing, b.group, admin.ErrKeyNotFound, missing},
		{"SubscribedChannel", channel, "", admin.ErrWrongType, channel},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := b.insp.Pause(b.ctx, tt.key, tt.group)
			if err == nil || (tt.target != nil && !errors.Is(err, tt.target)) || !contains(err, tt.names) {
				t.Fatalf("Pause(%q, %q) = %v, want an error (%v) naming %q", tt.key, tt.group, err, tt.target, tt.names)
			}
			if p, err := b.insp.Paused(b.ctx, tt.key, tt.group); err != nil || p {
				t.Fatalf("after the refused Pause, Paused = %v, %v; want false", p, err)
			}
		})
	}
}
