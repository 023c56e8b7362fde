package settle_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// Misconfiguration and bad input (DESIGN.md "Reliability promises": a clear error and a
// settlement, never a crash or a silent loss). Each row: what goes wrong → what settle
// does → the test that proves it. Rows already proven elsewhere are referenced, not
// repeated.
//
//   - The stream key holds another type → Run returns an Open error naming the key and
//     WRONGTYPE; nothing is read. TestStreamWrongTypeKeyFailsOpenNamingKey.
//   - The consumer group is missing at read time (XGROUP DESTROY under a running App) →
//     NOGROUP is answered by creating the group again from the last entry the consumer
//     was delivered (or "0"), whatever StartAt said: at least once, never skipped; logged
//     at Error. TestStreamRecreatesDestroyedGroup,
//     TestStreamRecreatedGroupStartsAfterTheLastDeliveredEntryWhateverStartAt.
//   - An entry has no payload field (written by redis-cli or another language) → a plain
//     handler sees every field as a header; Typed gets a *DecodeError, the attempt is
//     spent and the entry dead-letters at the cap with its fields intact.
//     TestStreamReadsEntriesWrittenByOtherClients (PlainHandlerSeesFieldsAsHeaders,
//     TypedHandlerGetsDecodeErrorAndDeadLetters); TestDecodeWithoutPayloadField.
//   - A garbled retry-count header → read as 0, logged once per mount.
//     TestStreamGarbledRetryCountReadsAsZeroAndLogsOnce; FuzzParseRetryCount.
//   - An invalid envelope on a list (starts like settle's, does not decode) → delivered
//     whole and undecodable, spends attempts, dead-letters intact at the cap.
//     TestList/InvalidEnvelopeSpendsAttemptsAndDeadLettersIntact; FuzzFromEnvelope.
//   - A payload that does not decode → Retry with a *DecodeError, dead letter at the cap.
//     sourcetest's UndecodablePayloadSpendsAttempts (every transport's conformance).
//   - A pending entry deleted from the stream before settlement → acknowledged, with a
//     warning. TestStreamPendingEntryDeletedBeforeSettlementIsAcknowledged.
//   - An oversized value (1 MiB) → delivered and settled like any other; the retry copy,
//     the parked copy and the dead letter keep it byte for byte.
//     TestBadInputOversizedValueKeepsItsBytes (below).
//   - The dead-letter key holds another type → the dead letter fails, is logged as an
//     error naming the key, the original stays pending and nothing is half-written
//     (TestStreamRetryIsOneAtomicStep/FailedDeadLetterWriteLeavesOriginalPending); once
//     the key is fixed the message reaches the dead letter exactly once
//     (TestBadInputWrongTypeDeadLetterKeyLosesNothing, below).
//   - The durable delay set's key takes another type while running → its sweep fails,
//     logged once naming the key; the mount reads on; once the key is fixed the sweep
//     says it succeeds again. TestBadInputWrongTypeDelaySetStopsOnlyItsSweep (below).
//   - The connection drops during settlement → the settlement fails (reported and
//     logged), the delivery stays pending and is delivered again on the same consumer,
//     then settled once: no loss, no second copy or dead letter.
//     TestBadInputDroppedConnectionDuringSettle (below); with miniredis's SetError:
//     TestStreamRetryIsOneAtomicStep/FailedCopyWriteRedeliversOriginal.
//   - A cross-slot configuration on Redis Cluster → refused at startup.
//     TestAppRefusesClusterDeadLetterInAnotherSlot, TestClusterCrossSlotConfigurationIsRefused.

// TestBadInputOversizedValueKeepsItsBytes proves a 1 MiB payload is delivered and
// settled, and that every copy settle writes of it (retry copy, parked delay, dead
// letter) carries it byte for byte.
func TestBadInputOversizedValueKeepsItsBytes(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)

	tests := []struct {
		name string
		// first is the handler's answer to the first delivery; a later one acks, except
		// under DeadLetter where every delivery fails.
		first error
		opts  func(b *sourcetest.StreamBundle) []settle.MountOption
		// deliveries is how many times the handler sees the payload.
		deliveries int
	}{
		{name: "RetryCopy", first: settle.Retry(errors.New("busy")), deliveries: 2,
			opts: func(*sourcetest.StreamBundle) []settle.MountOption { return nil }},
		{name: "DurableDelay", first: settle.RetryAfter(20*time.Millisecond, errors.New("later")), deliveries: 2,
			opts: func(b *sourcetest.StreamBundle) []settle.MountOption {
				return []settle.MountOption{settle.DelayIn(delayed.DurableZset{Key: b.R.Key("delayed")})}
			}},
		{name: "DeadLetter", first: settle.Retry(errors.New("declined")), deliveries: 2,
			opts: func(b *sourcetest.StreamBundle) []settle.MountOption {
				return []settle.MountOption{settle.MaxAttempts(2), settle.DeadLetter(b.DLQ)}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := sourcetest.SetupStream(t)
			id, err := settle.NewPublisher(b.R.Client).PublishBytes(context.Background(), b.In, big)
			if err != nil {
				t.Fatalf("publish 1 MiB: %v", err)
			}
			var mu sync.Mutex
			var seen [][]byte
			h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				mu.Lock()
				seen = append(seen, append([]byte(nil), m.Payload...))
				mu.Unlock()
				if m.Attempt == 1 || tt.name == "DeadLetter" {
					return tt.first
				}
				return nil
			})
			opts := append([]settle.MountOption{settle.Concurrency(1)}, tt.opts(b)...)
			stop := sourcetest.RunApp(t, b.App(t, b.Stream(), h, opts...))
			evs := sourcetest.WaitFinals(t, b.Rec, 1)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Err != nil {
					t.Fatalf("settlement %+v failed", e)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tt.deliveries {
				t.Fatalf("%d deliveries, want %d", len(seen), tt.deliveries)
			}
			for i, p := range seen {
				if !bytes.Equal(p, big) {
					t.Fatalf("delivery %d carried %d bytes, not the 1 MiB published", i+1, len(p))
				}
			}
			if n := b.Pending(t); n != 0 {
				t.Fatalf("%d pending, want 0", n)
			}
			entries := b.Entries(t, b.In)
			if len(entries) != 2 || entries[0].ID != id || entries[1].Values["payload"] != string(big) || entries[1].Values[settle.HeaderRetryCount] != "1" {
				t.Fatalf("stream holds %d entries; want the original and one copy with the 1 MiB payload and retry count 1", len(entries))
			}
			if tt.name == "DeadLetter" {
				dead := b.Entries(t, b.DLQ)
				if len(dead) != 1 || dead[0].Values["payload"] != string(big) || dead[0].Values[settle.HeaderDeadID] != entries[1].ID {
					t.Fatalf("dead letters: %d, want 1 carrying the 1 MiB payload of the copy %s", len(dead), entries[1].ID)
				}
			}
		})
	}
}

// TestBadInputWrongTypeDeadLetterKeyLosesNothing proves that a dead-letter key holding
// another type keeps the message pending with an error logged naming the key, and that
// once the key is fixed the message is dead-lettered exactly once.
// occupyingFailure is a handler that fails every delivery; its first call first makes
// key a string, so that every write to key fails from then on: the key's type changes
// while the App runs (Run refuses a key of another type at the start).
func occupyingFailure(t *testing.T, rdb *redis.Client, key string) settle.Handler {
	var once sync.Once
	return settle.HandlerFunc(func(ctx context.Context, _ *settle.Message) error {
		once.Do(func() {
			if err := rdb.Set(ctx, key, "occupied", 0).Err(); err != nil {
				t.Error(err)
			}
		})
		return errors.New("declined")
	})
}

func TestBadInputWrongTypeDeadLetterKeyLosesNothing(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	id := b.Publish(t, "doomed", nil)
	fail := occupyingFailure(t, b.R.Client, b.DLQ)
	stop := sourcetest.RunApp(t, b.App(t, b.Stream(), fail, settle.MaxAttempts(1), settle.DeadLetter(b.DLQ), settle.Concurrency(1)))

	b.Rec.WaitFor(t, sourcetest.WaitBound, "a failed dead letter", func(evs []settle.Settled) bool { return len(evs) > 0 })
	logged := b.Logs.Containing("settlement failed")
	if len(logged) == 0 || logged[0].Level != slog.LevelError || !strings.Contains(logged[0].Attrs["error"], b.DLQ) {
		t.Fatalf("logs %+v; want an error naming %s", logged, b.DLQ)
	}
	if n := b.Pending(t); n != 1 {
		t.Fatalf("%d pending while the dead letter fails, want the original", n)
	}
	if err := b.R.Client.Del(ctx, b.DLQ).Err(); err != nil {
		t.Fatal(err)
	}
	evs := sourcetest.WaitFinals(t, b.Rec, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Action != settle.ActionDeadLetter || last.Err != nil || last.ID != id {
		t.Fatalf("last settlement %+v, want %s dead-lettered", last, id)
	}
	if dead := b.Entries(t, b.DLQ); len(dead) != 1 || dead[0].Values[settle.HeaderDeadID] != id {
		t.Fatalf("dead letters %+v, want exactly one, of %s", dead, id)
	}
	if n := b.Pending(t); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}

// TestBadInputWrongTypeDelaySetStopsOnlyItsSweep: a durable delay set whose key takes
// another type while the App runs fails its sweep, which is logged once at Error naming
// the key and WRONGTYPE; the mount reads on (a message published meanwhile is acked:
// before, every read failed and nothing was delivered), and once the key is fixed the
// sweep succeeds again and says so.
func TestBadInputWrongTypeDelaySetStopsOnlyItsSweep(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	ctx := context.Background()
	set := b.R.Key("delayed")
	b.Publish(t, "first", nil)
	var calls atomic.Int32
	// The first delivery's handler makes the delay set a string: its type changes while
	// the App runs (Run refuses it at the start).
	h := settle.HandlerFunc(func(context.Context, *settle.Message) error {
		if calls.Add(1) == 1 {
			if err := b.R.Client.Set(ctx, set, "occupied", 0).Err(); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	const sweepFailed, sweepsAgain = "delay set sweep failed", "delay set sweep succeeds again"
	sink := logtest.New(sweepFailed, sweepsAgain)
	cfg := b.Config()
	cfg.Logger = sink.Logger()
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(b.Stream(), h, settle.DelayIn(delayed.DurableZset{Key: set}), settle.Concurrency(1))
	stop := sourcetest.RunApp(t, app)
	sourcetest.WaitFinals(t, b.Rec, 1)
	select {
	case <-sink.Seen(sweepFailed):
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("no sweep failure logged while the delay set holds a string")
	}
	if v, ok := sink.Attr(sweepFailed, "error"); sink.Count(slog.LevelError, sweepFailed) != 1 || !ok || !strings.Contains(v.String(), "WRONGTYPE") {
		t.Fatalf("sweep failure logged with error %v; want one error-level record with WRONGTYPE", v)
	}
	if v, _ := sink.Attr(sweepFailed, "key"); v.String() != set {
		t.Fatalf("sweep failure logged for key %v, want the delay set %s", v, set)
	}
	id := b.Publish(t, "meanwhile", nil)
	evs := sourcetest.WaitFinals(t, b.Rec, 2)
	if evs[1].ID != id || evs[1].Action != settle.ActionAck {
		t.Fatalf("settlements %+v, want %s acked while the delay set is unusable", evs, id)
	}
	if err := b.R.Client.Del(ctx, set).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sink.Seen(sweepsAgain):
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("the sweep did not say it succeeds again once the key was fixed")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := sink.Count(slog.LevelError, sweepFailed); n != 1 {
		t.Fatalf("the sweep failure was logged %d times, want once until it succeeded", n)
	}
}

// TestBadInputDroppedConnectionDuringSettle proves that when the App's connections drop
// (closed, and new ones refused) while a handler runs, the settlement fails, the delivery
// stays pending and, once Redis is reachable again, it is delivered again and settled
// exactly once: nothing lost, no second copy, no second dead letter.
func TestBadInputDroppedConnectionDuringSettle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handle  func(m *settle.Message) error
		opts    func(b *sourcetest.StreamBundle) []settle.MountOption
		final   settle.Action
		entries int // in the stream at the end
		dead    int // in the dead-letter stream at the end
	}{
		{name: "Ack", handle: func(*settle.Message) error { return nil },
			opts: func(*sourcetest.StreamBundle) []settle.MountOption { return nil }, final: settle.ActionAck, entries: 1},
		{name: "RetryCopy", handle: func(m *settle.Message) error {
			// The failed copy leaves the original pending; it is delivered again, at
			// attempt 1 still (a failed settlement write is not charged), retried again,
			// and the copy acked at attempt 2.
			if m.Attempt == 1 {
				return settle.Retry(errors.New("busy"))
			}
			return nil
		}, opts: func(*sourcetest.StreamBundle) []settle.MountOption { return nil }, final: settle.ActionAck, entries: 2},
		{name: "DeadLetter", handle: func(*settle.Message) error { return errors.New("declined") },
			opts: func(b *sourcetest.StreamBundle) []settle.MountOption {
				return []settle.MountOption{settle.MaxAttempts(1), settle.DeadLetter(b.DLQ)}
			}, final: settle.ActionDeadLetter, entries: 1, dead: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := sourcetest.SetupStream(t)
			net := newFlakyNet()
			o := b.R.Client.Options()
			client := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Dialer: net.dial, MaxRetries: 1})
			t.Cleanup(func() { _ = client.Close() })
			id := b.Publish(t, "hello", nil)

			var calls atomic.Int32
			h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
				if calls.Add(1) == 1 {
					net.drop()
				}
				return tt.handle(m)
			})
			cfg := b.Config()
			cfg.OnSettled = func(ctx context.Context, s settle.Settled) {
				if s.Err != nil {
					net.restore()
				}
				b.Rec.OnSettled(ctx, s)
			}
			app, err := settle.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(settle.Stream(client, b.In, b.Group, settle.Block(sourcetest.TestBlock)), h, append([]settle.MountOption{settle.Concurrency(1)}, tt.opts(b)...)...)
			stop := sourcetest.RunApp(t, app)
			evs := sourcetest.WaitFinals(t, b.Rec, 1)
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			if evs[0].Err == nil || evs[0].ID != id {
				t.Fatalf("first settlement %+v, want one of %s failing on the dropped connection", evs[0], id)
			}
			last := evs[len(evs)-1]
			if last.Action != tt.final || last.Err != nil {
				t.Fatalf("last settlement %+v, want %s applied", last, tt.final)
			}
			if finals := sourcetest.FinalIDs(evs); len(finals) != 1 {
				t.Fatalf("final settlements of %v, want exactly one", finals)
			}
			if n := b.Pending(t); n != 0 {
				t.Fatalf("%d pending, want 0", n)
			}
			if n := len(b.Entries(t, b.In)); n != tt.entries {
				t.Fatalf("stream holds %d entries, want %d (no copy written twice)", n, tt.entries)
			}
			if n := len(b.Entries(t, b.DLQ)); n != tt.dead {
				t.Fatalf("dead-letter stream holds %d entries, want %d", n, tt.dead)
			}
			if len(b.Logs.Containing("settlement failed")) == 0 {
				t.Fatal("the failed settlement was not logged")
			}
		})
	}
}

// flakyNet dials TCP and can drop every connection it made and refuse new ones until
// restored: a client's view of a network partition.
type flakyNet struct {
	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

func newFlakyNet() *flakyNet { return &flakyNet{} }

func (f *flakyNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("flakynet: connection refused (dropped by the test)")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	f.conns = append(f.conns, c)
	return c, nil
}

// drop closes every connection and refuses new ones.
func (f *flakyNet) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

// restore accepts new connections again.
func (f *flakyNet) restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
}
