package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestPartitionedStreamShowsEachPartitionsOwnerBacklogAndDeadLetters: the view of a
// partitioned stream's group names its live member, the partitions it holds (each with
// a live lease and a token), and per partition its length, pending count, lag and dead
// letters (counted in the partition's own copy of the dead-letter stream); after the
// member's graceful stop it has no member and no partition an owner.
func TestPartitionedStreamShowsEachPartitionsOwnerBacklogAndDeadLetters(t *testing.T) {
	t.Parallel()
	const parts, total = 4, 40
	r := redistest.New(t)
	name, group, dlq := r.Untagged(t, "orders"), "workers", "orders.dlq"
	ctx := context.Background()
	src := settle.PartitionedStream(r.Client, name, group, settle.Partitions(parts), settle.Consumer("m1"), settle.Block(50*time.Millisecond))
	if err := src.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(r.Client)
	for k := range total {
		customer := fmt.Sprintf("customer-%d", k%10)
		if _, err := pub.Publish(ctx, name, k, settle.Key(customer), settle.Headers(map[string]string{"customer": customer})); err != nil {
			t.Fatal(err)
		}
	}
	rec := sourcetest.NewRecorder()
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: rec.OnSettled})
	if err != nil {
		t.Fatal(err)
	}
	// customer-0's messages are dead-lettered, the others acked.
	app.Mount(src, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Headers["customer"] != "customer-0" {
			return nil
		}
		return errors.New("declined")
	}), settle.MaxAttempts(1), settle.DeadLetter(dlq))
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = app.Run(runCtx) })
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	defer stop()
	rec.WaitFor(t, 20*time.Second, "every message settled", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) >= total })

	insp := admin.NewInspector(r.Client)
	info, err := insp.PartitionedStream(ctx, name, group, admin.PartitionDeadLetter(dlq))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != name || info.Group != group || info.Hash != "fnv1a32" || len(info.Partitions) != parts {
		t.Fatalf("%+v, want %s group %s, hash fnv1a32, %d partitions", info, name, group, parts)
	}
	if len(info.Members) != 1 || info.Members[0].Name != "m1" || info.Members[0].Owns != parts || info.Members[0].TTL <= 0 {
		t.Fatalf("members %+v, want m1 alone holding all %d partitions, its heartbeat live", info.Members, parts)
	}
	var length, dead int64
	for k, p := range info.Partitions {
		if p.Index != k || p.Owner != "m1" || p.LeaseLeft <= 0 || p.Token == "" || p.Pending != 0 {
			t.Fatalf("partition %d: %+v, want held by m1 with a live lease and a token, nothing pending", k, p)
		}
		if redistest.Real() && p.Lag != 0 {
			t.Fatalf("partition %d: lag %d, want 0 (all read)", k, p.Lag)
		}
		length += p.Length
		dead += p.DeadLetters
	}
	if length != total || dead != 4 {
		t.Fatalf("partitions hold %d entries and %d dead letters, want %d and 4 (customer-0's)", length, dead, total)
	}

	stop()
	info, err = insp.PartitionedStream(ctx, name, group)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != 0 {
		t.Fatalf("members after a graceful stop: %+v, want none", info.Members)
	}
	for _, p := range info.Partitions {
		if p.Owner != "" || p.LeaseLeft != 0 || p.DeadLetters != 0 {
			t.Fatalf("partition %d after a graceful stop: %+v, want no owner (handed back) and no dead letters counted without PartitionDeadLetter", p.Index, p)
		}
	}
}

// TestPartitionedStreamRefusesWhatIsNotOne: a missing name, a plain stream and a hash
// without a partition count are refused with errors naming them.
func TestPartitionedStreamRefusesWhatIsNotOne(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	insp := admin.NewInspector(r.Client)
	missing, stream, hash := r.Untagged(t, "missing"), r.Untagged(t, "plain"), r.Untagged(t, "hash")
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.HSet(ctx, hash, "field", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want error
	}{{missing, admin.ErrKeyNotFound}, {stream, admin.ErrWrongType}, {hash, admin.ErrWrongType}, {"{braced}", nil}} {
		_, err := insp.PartitionedStream(ctx, tt.name, "workers")
		if err == nil || tt.want != nil && !errors.Is(err, tt.want) || !strings.Contains(err.Error(), strings.Trim(tt.name, "{}")) {
			t.Errorf("PartitionedStream(%q): %v, want an error wrapping %v naming it", tt.name, err, tt.want)
		}
	}
}
