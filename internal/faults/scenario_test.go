package faults_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/faults"
)

// messages is how many messages each scenario publishes.
const messages = 200

// TestConnectionResetsMidRunLoseNothing: every connection of the App is cut again and
// again while it works (with an RST or a FIN, in turn), and for a while new connections
// are refused; every message still ends in exactly one final state, and every duplicate
// run is explained.
func TestConnectionResetsMidRunLoseNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			w := setupWorld(t, tr, 50*time.Millisecond)
			w.run(messages, func(w *world) int {
				n := 0
				for i := range 8 {
					w.waitSettled(int64(20 * (i + 1)))
					if i%3 == 2 {
						w.proxy.Refuse(30 * time.Millisecond)
					}
					if i%2 == 0 {
						w.proxy.ResetAll()
					} else {
						w.proxy.CloseAll()
					}
					n++
				}
				return n
			})
		})
	}
}

// TestLatencyBeyondBlockLosesNothing: for a stretch of the run, every reply comes
// later than a read's Block bound (and requests lag too); reads that return late, with
// entries, are handled like any other.
func TestLatencyBeyondBlockLosesNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			const block = 30 * time.Millisecond
			w := setupWorld(t, tr, block)
			w.run(messages, func(w *world) int {
				w.waitSettled(30)
				w.proxy.SetLatency(faults.ToClient, 4*block)
				w.proxy.SetLatency(faults.ToServer, block/2)
				w.waitSettled(90)
				w.proxy.SetLatency(faults.ToClient, 0)
				w.proxy.SetLatency(faults.ToServer, 0)
				return 1
			})
		})
	}
}

// TestResetsDuringSettlementLoseNothing: the reply of a settlement write (an XACK, a
// settlement script, an LREM) is dropped after the server ran it, and the connection
// cut, again and again: the App counts those as failed settlements; nothing is lost and
// every duplicate is explained by them.
func TestResetsDuringSettlementLoseNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			w := setupWorld(t, tr, 50*time.Millisecond)
			w.run(messages, func(w *world) int {
				w.waitSettled(1) // cut settlements, not the App's start
				n := 0
				for i := range 12 {
					rule := &faults.Rule{Request: settlementWrite, Teardown: faults.Teardown(i % 2)}
					w.proxy.CutReply(rule)
					select {
					case <-rule.Done():
						n++
					case <-w.ended:
						t.Fatalf("Run returned after %d cuts: %v", n, w.runErr)
					case <-time.After(bound):
						t.Fatalf("no settlement write to cut after %s (%d cut)", bound, n)
					}
				}
				return n
			})
		})
	}
}

// settlementWrite matches the requests that settle: XACK, the settlement scripts,
// a reliable list's LREM.
func settlementWrite(req []byte) bool {
	req = bytes.ToLower(req)
	for _, w := range [][]byte{[]byte("xack"), []byte("evalsha"), []byte("lrem")} {
		if bytes.Contains(req, w) {
			return true
		}
	}
	return false
}
