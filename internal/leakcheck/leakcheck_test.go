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
	started, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(returned)
		blockedForLeakcheck(started, release)
	}()
	<-started // its stack holds blockedForLeakcheck from here on
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
func blockedForLeakcheck(started chan<- struct{}, release <-chan struct{}) {
	close(started)
	<-release
}

// TestIgnoredKnowsTheTestingPackagesAndOsSignalsGoroutines: the goroutines every test
// binary may have are not leaks, whatever their argument lists look like; others are.
func TestIgnoredKnowsTheTestingPackagesAndOsSignalsGoroutines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stack string
		want        bool
	}{
		{"SignalLoop", "goroutine 5 [syscall]:\nos/signal.signal_recv()\n\t/usr/local/go/src/runtime/sigqueue.go:152 +0x98\nos/signal.loop()\n\t/usr/local/go/src/os/signal/signal_unix.go:23 +0x13\ncreated by os/signal.Notify.func1.1 in goroutine 21", true},
		{"ParallelTestWaiting", "goroutine 7 [chan receive]:\ntesting.(*T).Parallel(0xc000103380)\n\t/usr/local/go/src/testing/testing.go:1818 +0x1c5", true},
		{"RunningTest", "goroutine 8 [running]:\ntesting.(*T).Run(0xc000103380, {0x5f0a1b, 0x4}, 0x6e5f10)\n\t/usr/local/go/src/testing/testing.go:1997 +0x3c5", false},
		{"UsersGoroutine", "goroutine 9 [chan receive]:\nexample.com/app.worker(...)\n\t/app/worker.go:12 +0x25", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ignored(tt.stack); got != tt.want {
				t.Fatalf("ignored = %v, want %v for\n%s", got, tt.want, tt.stack)
			}
		})
	}
}
