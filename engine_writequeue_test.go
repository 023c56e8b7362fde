package settle

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// queueMount is a mount holding held deliveries, for a writeQueue's tests.
func queueMount(held int) *mount {
	m := &mount{slots: make(chan struct{}, 16)}
	for range held {
		m.slots <- struct{}{}
	}
	return m
}

// The last delivery the mount holds is written at once: nothing else will come to
// linger for.
func TestWriteQueueWritesTheLastHeldDeliveryWithoutLingering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newWriteQueue[int](queueMount(1), false, 8) // the adding delivery's own slot
		start := time.Now()
		q.add(1)
		got, ok := q.next(nil, newLingerTimer())
		if !ok || len(got) != 1 || time.Since(start) != 0 {
			t.Fatalf("next = %v, %v after %s; want [1] at once", got, ok, time.Since(start))
		}
	})
}

// While other deliveries are held, what comes within the linger goes in one batch,
// written once the linger passes.
func TestWriteQueueGathersWhatComesWithinTheLingerWhileOthersAreHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newWriteQueue[int](queueMount(5), false, 8)
		q.add(1)
		go func() {
			time.Sleep(writeLinger / 2)
			q.add(2)
		}()
		start := time.Now()
		got, ok := q.next(nil, newLingerTimer())
		if !ok || len(got) != 2 || time.Since(start) != writeLinger {
			t.Fatalf("next = %v, %v after %s; want [1 2] after the linger %s", got, ok, time.Since(start), writeLinger)
		}
	})
}

// A full batch goes at once, and an add beyond it waits until the writer takes the
// batch (the bound a full channel kept).
func TestWriteQueueWritesAFullBatchAtOnceAndBoundsWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newWriteQueue[int](queueMount(10), false, 2)
		q.add(1)
		q.add(2)
		added := make(chan struct{})
		go func() {
			q.add(3)
			close(added)
		}()
		synctest.Wait()
		select {
		case <-added:
			t.Fatal("a third add went in beside a full batch")
		default:
		}
		start := time.Now()
		got, ok := q.next(nil, newLingerTimer())
		if !ok || len(got) != 2 || time.Since(start) != 0 {
			t.Fatalf("next = %v, %v after %s; want [1 2] at once", got, ok, time.Since(start))
		}
		<-added
	})
}

// Closing wakes every writer waiting, and each ends once nothing waits.
func TestWriteQueueCloseEndsEveryWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newWriteQueue[int](queueMount(3), true, 8)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var written []int
		for range 3 {
			wg.Go(func() {
				timer := newLingerTimer()
				var batch []int
				for {
					var ok bool
					if batch, ok = q.next(batch, timer); !ok {
						return
					}
					mu.Lock()
					written = append(written, batch...)
					mu.Unlock()
				}
			})
		}
		q.add(1)
		q.add(2)
		q.close()
		wg.Wait()
		if len(written) != 2 {
			t.Fatalf("written %v, want both requests", written)
		}
	})
}
