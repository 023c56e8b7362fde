package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/internal/wire"
)

// firstDeliveryID runs an App with src until it has acked one item published with
// publish, stops it and returns the delivery's ID.
func firstDeliveryID(t *testing.T, src settle.Source, publish func()) string {
	t.Helper()
	rec := sourcetest.NewRecorder()
	app := sourcetest.NewApp(t, rec, nil)
	app.Mount(src, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	stop := sourcetest.StartApp(t, app)
	publish()
	evs := rec.WaitFor(t, sourcetest.WaitTimeout, "the ack", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return evs[len(evs)-1].ID
}

// TestListDeliveryIDsAreUniqueAcrossRestarts: the first delivery of a process restarted
// with the same consumer name does not take the ID of the first delivery before the
// restart (ids restarted at "pod-1:1" and "1" in every process), so (Mount, ID, Attempt)
// keys settlements as OnSettled advises. Reliable and plain lists.
func TestListDeliveryIDsAreUniqueAcrossRestarts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  func(r *redistest.Redis, key string) settle.Source
	}{
		{"ReliableList", func(r *redistest.Redis, key string) settle.Source {
			return settle.ReliableList(r.Client, key, settle.Consumer("pod-1"), settle.Heartbeat(time.Second))
		}},
		{"List", func(r *redistest.Redis, key string) settle.Source { return settle.List(r.Client, key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.New(t)
			key := r.Key("jobs")
			publish := func() {
				if err := settle.NewPublisher(r.Client).PublishList(context.Background(), key, "job"); err != nil {
					t.Error(err)
				}
			}
			before := firstDeliveryID(t, tc.src(r, key), publish)
			after := firstDeliveryID(t, tc.src(r, key), publish)
			if before == after {
				t.Fatalf("the first delivery after the restart has the ID %q of the first before it", after)
			}
		})
	}
}

// TestReliableListDeliversAnItemPushedIntoItsLiveProcessingList: an item no delivery
// holds (pushed into a running consumer's processing list by someone else) is found by
// the keeper's periodic re-read and delivered, without waiting for a restart.
func TestReliableListDeliversAnItemPushedIntoItsLiveProcessingList(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("jobs")
	rec := sourcetest.NewRecorder()
	app := sourcetest.NewApp(t, rec, nil)
	got := make(chan string, 2)
	app.Mount(settle.ReliableList(r.Client, key, settle.Consumer("live"), settle.Heartbeat(200*time.Millisecond)),
		settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			got <- string(m.Payload)
			return nil
		}))
	sourcetest.StartApp(t, app)
	// The consumer is running once it has acked a first item.
	if err := settle.NewPublisher(r.Client).PublishListBytes(ctx, key, []byte("first")); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, sourcetest.WaitTimeout, "the first ack", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 1 })
	processing := settle.ProcessingList(key, "live")
	if err := r.Client.RPush(ctx, processing, wire.Envelope([]byte("pushed"), nil)).Err(); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, sourcetest.WaitTimeout, "the pushed item's ack", func(evs []settle.Settled) bool { return sourcetest.Finals(evs) == 2 })
	if first, pushed := <-got, <-got; first != "first" || pushed != "pushed" {
		t.Fatalf("handled %q then %q, want first then pushed", first, pushed)
	}
	if n, err := r.Client.LLen(ctx, processing).Result(); err != nil || n != 0 {
		t.Fatalf("processing list holds %d items (%v), want none", n, err)
	}
}
