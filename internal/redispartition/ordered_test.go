package redispartition_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestOrderedPartitionedStream runs the Ordered scenarios on a PartitionedStream of 4
// partitions, on miniredis or, with SETTLE_REDIS_URL set, on a real server, on a fake
// clock; its crash is a member that read a partition's entries and died, whose
// partition another member takes over.
func TestOrderedPartitionedStream(t *testing.T) {
	t.Parallel()
	sourcetest.RunOrdered(t, func(t *testing.T) *sourcetest.OrderedSubject {
		b := newBundle(t)
		pub := settle.NewPublisher(b.r.Client)
		return &sourcetest.OrderedSubject{
			Clock:      sourcetest.NewClock(),
			DeadLetter: "dead",
			Publish: func(t testing.TB, key, payload string) {
				t.Helper()
				if _, err := pub.PublishBytes(context.Background(), b.name, []byte(payload), settle.Key(key)); err != nil {
					t.Fatalf("publish: %v", err)
				}
			},
			Crash: func(t testing.TB, n int) {
				t.Helper()
				key := keys.Partition(b.name, settle.PartitionFor("a", parts))
				if err := b.r.Client.XGroupCreateMkStream(context.Background(), key, b.group, "0").Err(); err != nil {
					t.Fatalf("xgroup create: %v", err)
				}
				sourcetest.CrashRead(t, b.r.Client, key, b.group, "crashed", n)
			},
			Source: b.source(t, settle.Consumer("m2")),
			Before: b.source(t, settle.Consumer("m1")),
		}
	})
}

// TestOrderedKeysStayInOrderWhileAMemberJoinsAndPartitionsMove: 300 messages over 10
// keys, read with Ordered by one member and then two, a second member joining mid-run
// (partitions drain from the first, once what waits behind their keys' heads has
// settled, and move): each message is handled once, and none starts before the one
// before it of its key has settled, whichever member runs it.
func TestOrderedKeysStayInOrderWhileAMemberJoinsAndPartitionsMove(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	const n, nkeys = 300, 10
	var mu sync.Mutex
	runs := map[int]int{}     // message -> handler runs
	settled := map[int]bool{} // message -> settled finally
	ids := map[string]int{}   // stream key and id -> message
	var bad []string
	handled := make(chan struct{}, n)
	handle := func(m *settle.Message) error {
		i, _ := strconv.Atoi(string(m.Payload))
		mu.Lock()
		if i >= nkeys && !settled[i-nkeys] {
			bad = append(bad, fmt.Sprintf("%d started before %d (its key's previous) had settled", i, i-nkeys))
		}
		runs[i]++
		ids[m.Key+" "+m.ID] = i
		mu.Unlock()
		return nil
	}
	byB := 0 // messages b ran
	handler := func(member string) settle.Handler {
		return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			mu.Lock()
			if member == "b" {
				byB++
			}
			mu.Unlock()
			return handle(m)
		})
	}
	mount := func(member string, sink *logtest.Sink) *sourcetest.Running {
		s := &sourcetest.Subject{Source: b.source(t, settle.Consumer(member), settle.LeaseTTL(300*time.Millisecond))}
		s.Config.Logger = sink.Logger()
		s.Config.OnSettled = func(_ context.Context, ev settle.Settled) {
			if !ev.Final() || ev.Err != nil {
				return
			}
			mu.Lock()
			i, ok := ids[ev.Key+" "+ev.ID]
			settled[i] = settled[i] || ok
			mu.Unlock()
			if ok {
				handled <- struct{}{}
			}
		}
		return sourcetest.Start(t, s, handler(member), settle.Ordered(), settle.Concurrency(4))
	}
	pub := settle.NewPublisher(b.r.Client)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := pub.PublishBytes(ctx, b.name, []byte(strconv.Itoa(i)), settle.Key(fmt.Sprintf("customer-%d", i%nkeys))); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := func(k int) {
		t.Helper()
		for range k {
			select {
			case <-handled:
			case <-time.After(sourcetest.WaitTimeout):
				t.Fatal("messages stopped settling")
			}
		}
	}
	runA := mount("a", logtest.New())
	publish(0, n/2)
	wait(n / 10)
	sinkB := logtest.New("settle: partition taken")
	runB := mount("b", sinkB) // joins: partitions drain from a (what waits behind its keys' heads settles first) and move
	select {
	case <-sinkB.Seen("settle: partition taken"):
	case <-time.After(sourcetest.WaitTimeout):
		t.Fatal("b took no partition")
	}
	publish(n/2, n)
	wait(n - n/10)
	runB.Stop(t)
	runA.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("out of order: %v", bad)
	}
	if byB == 0 {
		t.Fatal("b ran no message: no partition moved while messages flowed")
	}
	for i := range n {
		if runs[i] != 1 {
			t.Fatalf("message %d ran %d times, want once", i, runs[i])
		}
	}
}

// TestOrderedLeaseLostWithAKeyWaitingHandsTheWaitingBackAndFreesTheirRoom: a member's
// lease on a partition is taken while a key's head runs there and its next message waits
// behind it, every slot of the mount held. The head's settlement is refused (lease lost);
// what waited behind it is left to the partition's new owner, not run here, and its room
// is freed: the member goes on reading its other partitions.
func TestOrderedLeaseLostWithAKeyWaitingHandsTheWaitingBackAndFreesTheirRoom(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	pa := settle.PartitionFor("a", parts)
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("y%d", i); settle.PartitionFor(k, parts) != pa {
			other = k
		}
	}
	var mu sync.Mutex
	var started []string
	release := make(chan struct{})
	sink := logtest.New("settle: partition taken", "settle: another consumer took a key's head over")
	s := &sourcetest.Subject{Source: b.source(t, settle.Consumer("a"))}
	s.Config.Logger = sink.Logger()
	run := sourcetest.Start(t, s, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		mu.Lock()
		started = append(started, string(m.Payload))
		mu.Unlock()
		if string(m.Payload) == "a1" {
			<-release
		}
		return nil
	}), settle.Ordered(), settle.Concurrency(1), settle.Prefetch(1))
	select {
	case <-sink.Seen("settle: partition taken"):
	case <-time.After(sourcetest.WaitTimeout):
		t.Fatal("a took no partition")
	}
	pub := settle.NewPublisher(b.r.Client)
	for _, p := range []string{"a1", "a2"} {
		if _, err := pub.PublishBytes(ctx, b.name, []byte(p), settle.Key("a")); err != nil {
			t.Fatal(err)
		}
	}
	// Polled: nothing signals a read (a2 pending here, held behind a1).
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(sourcetest.WaitTimeout)
	for {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		if n > 0 && b.pending(t) == 2 {
			break
		}
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatal("a1 never started with a2 read behind it")
		}
	}
	// Another member takes the partition's lease (a's ran out, as under a long pause).
	lease := keys.PartitionLease(b.name, pa, b.group)
	if err := b.r.Client.HSet(ctx, lease, "owner", "ghost", "until", "99999999999999").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.r.Client.HIncrBy(ctx, lease, "token", 1).Err(); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case <-sink.Seen("settle: another consumer took a key's head over"):
	case <-time.After(sourcetest.WaitTimeout):
		t.Fatal("a2 was not handed back")
	}
	if _, err := pub.PublishBytes(ctx, b.name, []byte(other), settle.Key(other)); err != nil {
		t.Fatal(err)
	}
	run.WaitFor(t, "the other partition's message acked", 0, func(evs []settle.Settled) bool {
		for _, e := range evs {
			if e.Action == settle.ActionAck && e.Err == nil {
				return true
			}
		}
		return false
	})
	run.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(started, "a2") {
		t.Fatalf("starts %v: a2 ran here after its partition's lease was lost", started)
	}
}
