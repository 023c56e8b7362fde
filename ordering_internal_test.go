package settle

import (
	"testing"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// TestARetryInPlaceRunsOnceItsDelayHasPassedAndStopCountsThoseStillWaiting: an Ordered
// mount's head retried in place is handed to the workers again, as its next attempt,
// only once its delay has passed on the engine's clock; stop runs none of those still
// waiting and counts them (the mount frees their slots), and once stopped no retry is
// scheduled (its caller frees the slot).
func TestARetryInPlaceRunsOnceItsDelayHasPassedAndStopCountsThoseStillWaiting(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	c.Made = make(chan struct{}, 64)
	pushed := make(chan *source.Delivery, 4)
	o := newOrdering(&mount{eng: &engine{clock: c}}, func(ds []*source.Delivery) {
		for _, d := range ds {
			pushed <- d
		}
	})
	a := &source.Delivery{ID: "1-0", Attempt: 1}
	b := &source.Delivery{ID: "2-0", Attempt: 1}
	if !o.again(a, time.Minute) || !o.again(b, time.Hour) {
		t.Fatal("a retry was refused before stop")
	}
	select {
	case <-c.Made: // the retries wait on the clock
	case <-time.After(5 * time.Second):
		t.Fatal("no timer made for the retries")
	}
	select {
	case d := <-pushed:
		t.Fatalf("%s was handed over before its delay", d.ID)
	default:
	}
	c.Advance(time.Minute)
	select {
	case d := <-pushed:
		if d != a || d.Attempt != 2 || !d.Redelivered {
			t.Fatalf("handed over %s attempt %d redelivered %v, want %s attempt 2 redelivered", d.ID, d.Attempt, d.Redelivered, a.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a was not handed over once its delay passed")
	}
	behind, again := o.stop()
	if len(behind) != 0 || again != 1 {
		t.Fatalf("stop: %d behind, %d retries waiting; want 0 and 1 (b)", len(behind), again)
	}
	if o.again(a, 0) {
		t.Fatal("a retry was scheduled once stopped")
	}
	c.Advance(time.Hour)
	select {
	case d := <-pushed:
		t.Fatalf("%s was handed over after stop", d.ID)
	default: // stop returned once its retries stopped running: nothing hands over now
	}
}
