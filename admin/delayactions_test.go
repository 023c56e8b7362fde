package admin_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/delayed"
)

// parked runs a Stream mount with a durable delay set whose handler asks for a retry an
// hour later on the first attempt and acks the second; it publishes one payment and
// waits until its retry copy is parked. It returns the set and the recorder.
func (b *testBundle) parked(t *testing.T) (set string, attempts *atomic.Int32, settled func(n int) []settle.Settled) {
	t.Helper()
	set = b.r.Key("delayed")
	attempts = new(atomic.Int32)
	h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		attempts.Add(1)
		if m.Attempt == 1 {
			return settle.RetryAfter(time.Hour, errors.New("provider busy"))
		}
		return nil
	})
	src := settle.Stream(b.r.Client, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1"))
	rec, _ := b.start(t, src, h, settle.MaxAttempts(3), settle.DelayIn(delayed.DurableZset{Key: set}))
	if _, err := settle.NewPublisher(b.r.Client).Publish(b.ctx, b.in, payment{Card: "4242", ID: 1}); err != nil {
		t.Fatal(err)
	}
	settled = func(n int) []settle.Settled {
		return rec.WaitFor(t, waitBound, "settlements", func(evs []settle.Settled) bool { return len(evs) >= n })
	}
	settled(1)
	return set, attempts, settled
}

func TestPromoteMakesAParkedRetryDueAndTheNextSweepDeliversIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, attempts, settled := b.parked(t)

	members, err := b.insp.DelayedMembers(b.ctx, set, 0)
	if err != nil || len(members) != 1 || members[0].Headers[settle.HeaderRetryCount] != "1" || members[0].Due.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("DelayedMembers = %+v, %v; want the retry copy, due in an hour", members, err)
	}
	handle := members[0].Handle

	dry, err := b.insp.Promote(b.ctx, set, admin.DelayFilter{Members: []string{handle}}, admin.DryRun())
	if err != nil || !dry.DryRun || len(dry.Done) != 1 {
		t.Fatalf("dry run = %+v, %v; want it selected", dry, err)
	}
	if got, _ := b.insp.DelayedMembers(b.ctx, set, 0); len(got) != 1 || !got[0].Due.Equal(members[0].Due) {
		t.Fatalf("the dry run moved the member: %+v", got)
	}
	res, err := b.insp.Promote(b.ctx, set, admin.DelayFilter{Members: []string{handle}})
	if err != nil || len(res.Done) != 1 || res.Done[0].Handle != handle {
		t.Fatalf("Promote = %+v, %v; want %s promoted", res, err, handle)
	}
	evs := settled(2)
	if evs[1].Attempt != 2 || !evs[1].Final() || attempts.Load() != 2 {
		t.Fatalf("settled %+v after the promotion, want the retry acked on attempt 2", evs[1])
	}
	if info, err := b.insp.DelaySet(b.ctx, set); err != nil || info.Size != 0 {
		t.Fatalf("delay set %+v, %v; want empty (swept)", info, err)
	}
	if _, err := b.insp.Promote(b.ctx, set, admin.DelayFilter{Members: []string{handle}}); !errors.Is(err, admin.ErrMemberNotFound) || !contains(err, handle) {
		t.Fatalf("Promote of a swept member = %v, want ErrMemberNotFound naming it", err)
	}
}

func TestCancelRemovesAParkedRetryOnceAndItIsNeverDelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, attempts, _ := b.parked(t)

	dry, err := b.insp.Cancel(b.ctx, set, admin.DelayFilter{All: true}, admin.DryRun())
	if err != nil || len(dry.Done) != 1 {
		t.Fatalf("dry run = %+v, %v; want the member shown", dry, err)
	}
	if info, _ := b.insp.DelaySet(b.ctx, set); info.Size != 1 {
		t.Fatalf("the dry run removed the member")
	}
	res, err := b.insp.Cancel(b.ctx, set, admin.DelayFilter{Members: []string{dry.Done[0].Handle}})
	if err != nil || len(res.Done) != 1 {
		t.Fatalf("Cancel = %+v, %v; want it removed", res, err)
	}
	if info, _ := b.insp.DelaySet(b.ctx, set); info.Size != 0 {
		t.Fatalf("the set holds %d after Cancel, want 0", info.Size)
	}
	if again, err := b.insp.Cancel(b.ctx, set, admin.DelayFilter{All: true}); err != nil || len(again.Done) != 0 {
		t.Fatalf("second Cancel = %+v, %v; want nothing removed", again, err)
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("handled %d times, want 1 (the cancelled retry never delivered)", n)
	}
}

func TestDelayActionsRefuseBadInputNamingItAndChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set, _, _ := b.parked(t)
	for _, tc := range []struct {
		name string
		key  string
		f    admin.DelayFilter
		is   error
		says string
	}{
		{"NoMembers", set, admin.DelayFilter{}, nil, "no members given"},
		{"MembersAndAll", set, admin.DelayFilter{All: true, Members: []string{"x"}}, nil, "not both"},
		{"MemberNotInTheSet", set, admin.DelayFilter{Members: []string{"1-1"}}, admin.ErrMemberNotFound, `"1-1"`},
		{"KeyOfTheWrongType", b.in, admin.DelayFilter{All: true}, admin.ErrWrongType, b.in},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, act := range map[string]func(context.Context, string, admin.DelayFilter, ...admin.DelayOption) (*admin.DelayResult, error){
				"Promote": b.insp.Promote, "Cancel": b.insp.Cancel,
			} {
				if _, err := act(b.ctx, tc.key, tc.f); err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !contains(err, tc.says) {
					t.Errorf("%s = %v, want an error (%v) saying %q", name, err, tc.is, tc.says)
				}
			}
		})
	}
	if members, _ := b.insp.DelayedMembers(b.ctx, set, 0); len(members) != 1 || members[0].Due.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("members %+v, want the one parked, still due in an hour", members)
	}
}
