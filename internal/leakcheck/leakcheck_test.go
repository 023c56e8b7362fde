package leakcheck

import (
	"strings"
	"testing"
	"time"
)

// TestCheckReportsAGoroutineThatOutlivesItsTestAndNothingOnceItReturned: a goroutine
// blocked on a channel is reported with its stack; once it has returned, Check finds
// nothing (the testing package's own goroutines are not reported).
func TestCheckReportsAGoroutineThatOutlivesItsTestAndNothingOnceItReturned(t *testing.T) {
	release, returned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(returned)
		blockedForLeakcheck(release)
	}()
	leaked := Check(10 * time.Millisecond)
	if len(leaked) != 1 || !strings.Contains(leaked[0], "blockedForLeakcheck") {
		t.Fatalf("Check found %d goroutines, want the blocked one:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
	close(release)
	<-returned
	if leaked := Check(Wait); len(leaked) != 0 {
		t.Fatalf("Check found goroutines after the blocked one returned:\n%s", strings.Join(leaked, "\n\n"))
	}
}

//go:noinline
func blockedForLeakcheck(release <-chan struct{}) { <-release }
