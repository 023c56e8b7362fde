// Package leakcheck fails a test binary whose goroutines outlive its tests. It is a few
// lines in place of go.uber.org/goleak, which the library module does not require (the
// test modules of internal/ that keep goleak use it there): after the tests, it reads
// every goroutine's stack and reports those that are not the runtime's, the testing
// package's or os/signal's, waiting up to Wait for goroutines that are still returning.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Wait is how long Main and Check give goroutines that are still returning.
const Wait = 2 * time.Second

// Main runs the tests and, when they passed, fails the binary if a goroutine outlived
// them. Call it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := Check(Wait); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutines outlived the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Check returns the stacks of the goroutines, other than the caller's and the
// runtime's, the testing package's or os/signal's, still running after wait (nil as
// soon as there are none).
func Check(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		leaked := others()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		// No signal tells when a goroutine has returned: look again shortly.
		time.Sleep(pause)
	}
}

// others returns the stacks of the goroutines that count as leaked.
func others() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// The first stack is the caller's own goroutine.
	stacks := strings.Split(string(buf), "\n\n")[1:]
	var out []string
	for _, s := range stacks {
		if s = strings.TrimSpace(s); s != "" && !ignored(s) {
			out = append(out, s)
		}
	}
	return out
}

// ignored reports whether a goroutine's stack is one the runtime, the testing package
// or os/signal runs in any test binary (goleak's default filters).
func ignored(stack string) bool {
	header, rest, _ := strings.Cut(stack, "\n")
	top, _, _ := strings.Cut(rest, "\n")
	if i := strings.LastIndex(top, "("); i > 0 { // "pkg.fn()", "pkg.(*T).fn(0x…, …)", "pkg.fn(...)"
		top = top[:i]
	}
	waiting := strings.Contains(header, "[chan receive")
	switch top {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return waiting
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	}
	return strings.Contains(stack, "runtime.ensureSigM") ||
		(strings.Contains(header, "[syscall") && strings.Contains(stack, "runtime.goexit"))
}
