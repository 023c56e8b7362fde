package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// openPTY returns a pseudo-terminal: the side a person types into, and the side the
// command reads as its terminal.
func openPTY(t *testing.T) (typist, term *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pts: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// onTerminal runs the binary with args against the test's Redis on a terminal (see
// runOnTerminal).
func (b *testBundle) onTerminal(t *testing.T, meanwhile func(), args ...string) result {
	t.Helper()
	return runOnTerminal(t, meanwhile, append([]string{"--redis", b.url}, args...)...)
}

// runOnTerminal runs the binary with args on a terminal, waits for its question, calls
// meanwhile, answers "y" and returns what it printed.
func runOnTerminal(t *testing.T, meanwhile func(), args ...string) result {
	t.Helper()
	typist, term := openPTY(t)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = term
	var out strings.Builder
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	asked := make(chan string, 1)
	rest := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stderr)
		var seen strings.Builder
		for !strings.Contains(seen.String(), "[y/N]") {
			c, err := r.ReadByte()
			if err != nil {
				break
			}
			seen.WriteByte(c)
		}
		asked <- seen.String()
		tail, _ := io.ReadAll(r)
		rest <- string(tail)
	}()
	var question string
	select {
	case question = <-asked:
	case <-time.After(waitBound):
		_ = cmd.Process.Kill()
		t.Fatal("the command asked nothing")
	}
	meanwhile()
	if _, err := typist.WriteString("y\n"); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	r := result{stdout: out.String(), stderr: question + <-rest}
	if err != nil {
		t.Fatalf("settle %s on a terminal: %v\n%s\n%s", strings.Join(args, " "), err, r.stdout, r.stderr)
	}
	return r
}

// addDead writes n dead letters of b.in to b.dlq as settle writes them, failing with
// "payment provider unavailable".
func (b *testBundle) addDead(t *testing.T, n int) {
	t.Helper()
	for k := 0; k < n; k++ {
		err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.dlq, Values: []any{"payload", "late",
			settle.HeaderDeadReason, "max attempts reached (2 of 2)", settle.HeaderDeadError, "payment provider unavailable",
			settle.HeaderDeadSource, b.in, settle.HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano)}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDlqActionsOnATerminalActOnWhatWasConfirmedNotOnArrivals is rule 1 of issue 23 for
// the command: with every filter, dead letters that arrive while the question waits
// are left alone, and the count said is the count done.
func TestDlqActionsOnATerminalActOnWhatWasConfirmedNotOnArrivals(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		flags []string
		n     int
	}{
		"none":   {nil, deadTotal},
		"error":  {[]string{"--error", "unavailable"}, deadUnavailable},
		"reason": {[]string{"--reason", "unavailable"}, deadUnavailable},
		"since":  {[]string{"--since", "1h"}, deadTotal},
		"source": {[]string{"--source", "SOURCE"}, deadTotal},
	} {
		for _, verb := range []string{"purge", "replay"} {
			t.Run(name+"/"+verb, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.deadLetters(t)
				flags := append([]string{}, tc.flags...)
				for k, f := range flags {
					if f == "SOURCE" {
						flags[k] = b.in
					}
				}
				r := b.onTerminal(t, func() { b.addDead(t, 5) }, append([]string{"dlq", verb, b.dlq}, flags...)...)
				if !strings.Contains(r.stderr, fmt.Sprintf(" %d dead letters", tc.n)) {
					t.Fatalf("the question does not name %d:\n%s", tc.n, r.stderr)
				}
				if left := b.xlen(t, b.dlq); left != int64(deadTotal-tc.n+5) {
					t.Fatalf("%d dead letters left, want %d: the 5 arrivals untouched\n%s", left, deadTotal-tc.n+5, r.stdout)
				}
			})
		}
	}
}

// TestInboxDeadActionsOnATerminalActOnWhatWasConfirmedNotOnArrivals is rule 1 of issue
// 23 for an inbox's dead rows on the command line: rows that die while the question
// waits are left alone, with each filter, on each database.
func TestInboxDeadActionsOnATerminalActOnWhatWasConfirmedNotOnArrivals(t *testing.T) {
	t.Parallel()
	forEachSQL(t, func(t *testing.T, b sqlBackend) {
		for name, tc := range map[string]struct {
			flags []string
			n     int
		}{
			"none":  {nil, deadRows},
			"error": {[]string{"--error", "unavailable"}, deadRowsUnavailable},
			"since": {[]string{"--since", "1h"}, deadRows},
		} {
			for _, verb := range []string{"purge", "replay"} {
				t.Run(name+"/"+verb, func(t *testing.T) {
					x := setupSQL(t, b)
					x.deadRows(t)
					args := append(append([]string{"inbox"}, x.flags()...), "dead", verb, groupDead)
					if verb == "replay" {
						args = append(args, "--to", groupEmails)
					}
					r := runOnTerminal(t, func() { x.addDeadRows(t, 3) }, append(args, tc.flags...)...)
					if !strings.Contains(r.stderr, fmt.Sprintf(" %d dead rows", tc.n)) {
						t.Fatalf("the question does not name %d:\n%s", tc.n, r.stderr)
					}
					if left := x.count(t, groupDead); left != deadRows-tc.n+3 {
						t.Fatalf("%d dead rows left, want %d: the 3 arrivals untouched\n%s", left, deadRows-tc.n+3, r.stdout)
					}
				})
			}
		}
	})
}

// addDeadRows writes n rows to the dead-letter group as a dead-lettering does: last
// error "provider unavailable", dead now.
func (x *sqlBundle) addDeadRows(t *testing.T, n int) {
	t.Helper()
	q := `INSERT INTO ` + x.table + ` (name, payload, last_error, dead_at) VALUES (?, ?, ?, ?)`
	var at any = time.Now().UTC()
	switch x.b.d {
	case inbox.Postgres:
		q = `INSERT INTO ` + x.table + ` (name, payload, last_error, dead_at) VALUES ($1, $2, $3, $4)`
	case inbox.SQLite:
		at = time.Now().UTC().Format("2006-01-02T15:04:05.000+00:00")
	}
	for k := 0; k < n; k++ {
		if _, err := x.db.ExecContext(context.Background(), q, groupDead, []byte{0x80}, "provider unavailable (late)", at); err != nil {
			t.Fatal(err)
		}
	}
}
