package redispartition_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// Two Apps on one partitioned stream share its partitions once the second has joined:
// each message is handled once, by the member that holds its partition.
func TestTwoMountsShareThePartitionsAndHandleEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	const n = 200
	var mu sync.Mutex
	seen := map[string][]string{} // payload -> the members that handled it
	handled, all := 0, make(chan struct{})
	handler := func(member string) settle.Handler {
		return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			mu.Lock()
			seen[string(m.Payload)] = append(seen[string(m.Payload)], member)
			if handled++; handled == n {
				close(all)
			}
			mu.Unlock()
			return nil
		})
	}
	mount := func(member string, sink *logtest.Sink) *sourcetest.Running {
		s := &sourcetest.Subject{Source: b.source(t, settle.Consumer(member), settle.LeaseTTL(2*time.Second))} // long enough that a loaded machine does not miss a beat
		s.Config.Logger = sink.Logger()
		return sourcetest.Start(t, s, handler(member))
	}
	// Each member must have taken a partition before the publish: whichever opens first
	// takes them all, and hands the other's back only at its next beat, so a publish
	// right after the second's first take could be handled by the first alone.
	sinkA, sinkB := logtest.New("settle: partition taken"), logtest.New("settle: partition taken")
	runA := mount("a", sinkA)
	runB := mount("b", sinkB)
	for name, sink := range map[string]*logtest.Sink{"a": sinkA, "b": sinkB} {
		select {
		case <-sink.Seen("settle: partition taken"):
		case <-time.After(sourcetest.WaitTimeout):
			t.Fatalf("%s took no partition", name)
		}
	}
	pub := settle.NewPublisher(b.r.Client)
	for i := range n {
		if _, err := pub.PublishBytes(ctx, b.name, []byte(strconv.Itoa(i)), settle.Key(fmt.Sprintf("customer-%d", i%40))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(sourcetest.WaitTimeout):
		t.Fatal("not every message was handled")
	}
	runA.Stop(t)
	runB.Stop(t)
	mu.Lock()
	defer mu.Unlock()
	by := map[string]int{}
	for i := range n {
		ms := seen[strconv.Itoa(i)]
		if len(ms) != 1 {
			t.Fatalf("message %d handled by %v, want once", i, ms)
		}
		by[ms[0]]++
	}
	if by["a"] == 0 || by["b"] == 0 {
		t.Fatalf("handled per member: %v; want both members to have handled some", by)
	}
}
