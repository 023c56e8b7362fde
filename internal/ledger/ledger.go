// Package ledger is the reliability tests' oracle: a shared file to which every process
// of a test appends one line per event (a publish, a handler run, its outcome, a
// settlement, a process started, killed or stopped), and Check, which reads the whole
// ledger after a full drain and says whether the promise held: every published message
// in exactly one final state (acked, dropped or dead-lettered, the dead-letter
// destination read to confirm), none lost, none unexpected, and every handler run the
// settlements did not ask for explained by a crash (its process was killed while the
// message was in flight) or by a lease or min-idle expiry.
//
// # Why a file
//
// The faults the tests inject kill consumer processes, not the machine: a line written
// with one write(2) to a file opened O_APPEND is in the kernel's page cache the moment
// the call returns, so it survives a SIGKILL of its writer without an fsync, and
// concurrent appends from several processes never interleave within a line (each line
// is far below a page). The file order is thus one total order of every event, consistent
// with real time, which Check uses to tell a redelivery after a crash from two deliveries
// in flight at once. A Redis stream would do as well, but would put the oracle inside the
// system under test: a ledger in Redis shares its faults.
package ledger

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Kind names an event.
type Kind string

// The events.
const (
	// KindPublish: the message ID was published (written by the test before any
	// consumer could see it).
	KindPublish Kind = "publish"
	// KindRun: a handler started on a delivery of ID.
	KindRun Kind = "run"
	// KindOutcome: that handler returned Outcome.
	KindOutcome Kind = "outcome"
	// KindSettle: the engine reported the settlement of that delivery (OnSettled):
	// Action, and Err when the settlement failed to apply.
	KindSettle Kind = "settle"
	// KindStart: process PID started.
	KindStart Kind = "start"
	// KindKill: process PID died without a drain: killed with SIGKILL, or exited in
	// the middle of its work (written by its parent once it reaped the process, so after
	// every line the process wrote).
	KindKill Kind = "kill"
	// KindStop: process PID stopped gracefully (its App's Run returned).
	KindStop Kind = "stop"
)

// Event is one line of the ledger.
type Event struct {
	// Action is a settlement's action ("ack", "copy", "dead_letter", …).
	Action string `json:"act,omitempty"`
	// Attempt is the delivery's attempt.
	Attempt int `json:"a,omitempty"`
	// Delivery is the delivery's id in its transport (a stream entry id, a row id).
	Delivery string `json:"d,omitempty"`
	// Err is why a settlement failed to apply ("" when it applied).
	Err string `json:"err,omitempty"`
	// ID is the message's own id, carried in a header or the payload.
	ID string `json:"id,omitempty"`
	// Kind is what happened.
	Kind Kind `json:"k"`
	// Outcome is what a handler returned ("ack", "drop", "retry", "retry_after", or
	// "panic"/"exit" for poison messages).
	Outcome string `json:"o,omitempty"`
	// PID is the process the event happened in (for kill: the process killed).
	PID int `json:"p"`
	// Time is when the line was written, in Unix milliseconds (for reading a failure).
	Time int64 `json:"t"`

	// Seq is the line's position in the ledger, 0-based; set by Read.
	Seq int `json:"-"`
}

// Writer appends events to a ledger file. It is safe for concurrent use, also from
// several processes at once.
type Writer struct {
	f   *os.File
	pid int
}

// Open opens (creating if needed) the ledger file at path for appending, as this
// process.
func Open(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Writer{f: f, pid: os.Getpid()}, nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Append writes e as one line, with one write(2). PID and Time are filled in when zero.
func (w *Writer) Append(e Event) error {
	if e.PID == 0 {
		e.PID = w.pid
	}
	if e.Time == 0 {
		e.Time = time.Now().UnixMilli()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Publish records that message id was published.
func (w *Writer) Publish(id string) error { return w.Append(Event{Kind: KindPublish, ID: id}) }

// Run records that a handler started on delivery (of message id, at attempt).
func (w *Writer) Run(id string, attempt int, delivery string) error {
	return w.Append(Event{Kind: KindRun, ID: id, Attempt: attempt, Delivery: delivery})
}

// Outcome records what the handler of that delivery returned.
func (w *Writer) Outcome(id string, attempt int, delivery, outcome string) error {
	return w.Append(Event{Kind: KindOutcome, ID: id, Attempt: attempt, Delivery: delivery, Outcome: outcome})
}

// Settle records a settlement of that delivery: its action, and the error that kept it
// from applying (nil when it applied).
func (w *Writer) Settle(id string, attempt int, delivery, action string, err error) error {
	e := Event{Kind: KindSettle, ID: id, Attempt: attempt, Delivery: delivery, Action: action}
	if err != nil {
		e.Err = err.Error()
	}
	return w.Append(e)
}

// Start records that this process started.
func (w *Writer) Start() error { return w.Append(Event{Kind: KindStart}) }

// Stop records that this process stopped gracefully.
func (w *Writer) Stop() error { return w.Append(Event{Kind: KindStop}) }

// Kill records that process pid died without a drain (SIGKILL, or an exit in the middle
// of its work); call it after the process was reaped, so the line follows every line the
// process wrote.
func (w *Writer) Kill(pid int) error { return w.Append(Event{Kind: KindKill, PID: pid}) }

// Read returns every event of the ledger file at path, in file order.
func Read(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("ledger: line %d: %w", len(evs)+1, err)
		}
		e.Seq = len(evs)
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return evs, nil
}
