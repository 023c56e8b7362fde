package script_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

func TestPartitionMetaRecordsOnceAndReplacesOnlyTheLayoutChecked(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	meta := r.Key("orders")
	if n, h, err := script.PartitionMeta(ctx, r.Client, meta, 16, "fnv1a32", 0); err != nil || n != 16 || h != "fnv1a32" {
		t.Fatalf("first record = %d, %q, %v; want 16 fnv1a32", n, h, err)
	}
	if n, _, err := script.PartitionMeta(ctx, r.Client, meta, 8, "fnv1a32", 0); err != nil || n != 16 {
		t.Fatalf("a second mount declaring 8 reads %d, %v; want the 16 recorded", n, err)
	}
	if n, _, err := script.PartitionMeta(ctx, r.Client, meta, 8, "fnv1a32", 4); err != nil || n != 16 {
		t.Fatalf("replacing from 4 (not recorded) gives %d, %v; want 16 kept", n, err)
	}
	if n, _, err := script.PartitionMeta(ctx, r.Client, meta, 8, "fnv1a32", 16); err != nil || n != 8 {
		t.Fatalf("replacing from 16 gives %d, %v; want 8", n, err)
	}
	plain := r.Key("plain")
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: plain, Values: []string{"f", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := script.PartitionMeta(ctx, r.Client, plain, 8, "fnv1a32", 0); err == nil || !strings.Contains(err.Error(), "stream") {
		t.Fatalf("meta on a plain stream's key: %v; want a refusal naming the stream", err)
	}
}

func TestMemberBeatListsLiveMembersAndForgetsThoseWhoseBeatRanOut(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("members:g")
	now := time.Now().UnixMilli()
	if _, err := script.MemberBeat(ctx, r.Client, key, "b", time.Second, now, false); err != nil {
		t.Fatal(err)
	}
	live, err := script.MemberBeat(ctx, r.Client, key, "a", 3*time.Second, now, false)
	if err != nil || !slices.Equal(live, []string{"a", "b"}) {
		t.Fatalf("live = %v, %v; want [a b]", live, err)
	}
	live, err = script.MemberBeat(ctx, r.Client, key, "a", 3*time.Second, now+1500, false)
	if err != nil || !slices.Equal(live, []string{"a"}) {
		t.Fatalf("live 1.5 s later = %v, %v; want [a] (b's 1 s beat ran out)", live, err)
	}
	live, err = script.MemberBeat(ctx, r.Client, key, "a", 3*time.Second, now+1500, true)
	if err != nil || len(live) != 0 {
		t.Fatalf("live after a leaves = %v, %v; want none", live, err)
	}
}

func TestLeaseIsHeldByOneMemberAtATimeWithAGrowingToken(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("lease:g")
	now := time.Now().UnixMilli()
	const ttl = 10 * time.Second
	st, tokA, err := script.Lease(ctx, r.Client, key, "a", "", ttl, now, false)
	if err != nil || st != script.LeaseTaken || tokA != "1" {
		t.Fatalf("a takes: %v %q %v; want taken, token 1", st, tokA, err)
	}
	if st, owner, _ := script.Lease(ctx, r.Client, key, "b", "", ttl, now+1000, false); st != script.LeaseOther || owner != "a" {
		t.Fatalf("b while a holds: %v %q; want other, a", st, owner)
	}
	if st, tok, _ := script.Lease(ctx, r.Client, key, "a", tokA, ttl, now+9000, false); st != script.LeaseHeld || tok != tokA {
		t.Fatalf("a renews: %v %q; want held, %s", st, tok, tokA)
	}
	// a renewed at +9 s: its lease runs to +19 s.
	if st, _, _ := script.Lease(ctx, r.Client, key, "b", "", ttl, now+18000, false); st != script.LeaseOther {
		t.Fatalf("b at +18 s: %v; want other (a renewed at +9 s)", st)
	}
	st, tokB, _ := script.Lease(ctx, r.Client, key, "b", "", ttl, now+19001, false)
	if st != script.LeaseTaken || tokB != "2" {
		t.Fatalf("b once a's lease ran out: %v %q; want taken, token 2", st, tokB)
	}
	if st, owner, _ := script.Lease(ctx, r.Client, key, "a", tokA, ttl, now+19002, false); st != script.LeaseOther || owner != "b" {
		t.Fatalf("a renewing a lost lease: %v %q; want other, b", st, owner)
	}
	if st, _, _ := script.Lease(ctx, r.Client, key, "a", tokA, ttl, now+19002, true); st != script.LeaseOther {
		t.Fatalf("a dropping a lease it lost: %v; want other", st)
	}
	if st, _, _ := script.Lease(ctx, r.Client, key, "b", tokB, ttl, now+19003, true); st != script.LeaseHeld {
		t.Fatalf("b hands back: %v; want held", st)
	}
	if st, tok, _ := script.Lease(ctx, r.Client, key, "a", tokA, ttl, now+19004, false); st != script.LeaseTaken || tok != "3" {
		t.Fatalf("a right after b handed back: %v %q; want taken, token 3", st, tok)
	}
}
