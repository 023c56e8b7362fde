package settletest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/settletest"
)

func TestClock(t *testing.T) {
	t.Parallel()
	start := time.UnixMilli(1_000_000)

	t.Run("AdvanceFiresDueTimersInDueOrder", func(t *testing.T) {
		t.Parallel()
		c := settletest.NewClock(start)
		late, early, never := c.NewTimer(3*time.Second), c.NewTimer(time.Second), c.NewTimer(time.Hour)
		c.Advance(5 * time.Second)
		e, l := <-early.C(), <-late.C()
		if !e.Equal(start.Add(time.Second)) || !l.Equal(start.Add(3*time.Second)) {
			t.Fatalf("fired at %v and %v, want each at its own due time", e, l)
		}
		select {
		case <-never.C():
			t.Fatalf("a timer due in an hour fired after 5s")
		default:
		}
		if got := c.Now(); !got.Equal(start.Add(5 * time.Second)) {
			t.Fatalf("now = %v, want start + 5s", got)
		}
	})

	t.Run("StoppedTimerDoesNotFire", func(t *testing.T) {
		t.Parallel()
		c := settletest.NewClock(start)
		tm := c.NewTimer(time.Second)
		if !tm.Stop() {
			t.Fatalf("Stop of a waiting timer = false")
		}
		c.Advance(time.Minute)
		select {
		case <-tm.C():
			t.Fatalf("stopped timer fired")
		default:
		}
		if tm.Stop() {
			t.Fatalf("second Stop = true")
		}
	})

	t.Run("AdvanceMovesMiniredisTime", func(t *testing.T) {
		t.Parallel()
		srv := settletest.Redis(t)
		if srv.Mini == nil {
			t.Skip("miniredis only: a real server keeps its own clock (scripts take the fake time as an argument)")
		}
		c := settletest.NewClock(start)
		c.AttachMiniredis(srv.Mini)
		c.Advance(30 * time.Second)
		got, err := srv.Client.Time(context.Background()).Result()
		if err != nil || !got.Equal(start.Add(30*time.Second)) {
			t.Fatalf("TIME = %v, %v; want start + 30s", got, err)
		}
	})

	t.Run("TimersMadeWhileAdvancingAreNotLost", func(t *testing.T) {
		t.Parallel()
		c := settletest.NewClock(start)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Go(func() {
				for i := 0; i < 200; i++ {
					tm := c.NewTimer(time.Millisecond)
					c.Advance(time.Millisecond)
					<-tm.C() // a lost timer would block here forever
				}
			})
		}
		wg.Wait()
		if c.Timers() != 0 {
			t.Fatalf("%d timers still waiting", c.Timers())
		}
	})
}
