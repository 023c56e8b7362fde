package redisstream_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

// trimSignal is a log handler that signals each time a mount logs that it trimmed its
// stream.
type trimSignal struct{ trimmed chan int64 }

func (s trimSignal) Enabled(context.Context, slog.Level) bool { return true }
func (s trimSignal) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s trimSignal) WithGroup(string) slog.Handler            { return s }
func (s trimSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "trimmed the stream") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "trimmed" {
				s.trimmed <- a.Value.Int64()
			}
			return true
		})
	}
	return nil
}

// trimmedHarness returns a harness whose App's trims are signalled on the channel.
func trimmedHarness(t testing.TB, opts ...settletest.Option) (*settletest.Harness, chan int64) {
	sig := trimSignal{trimmed: make(chan int64, 16)}
	return settletest.New(t, append(opts, settletest.WithConfig(settle.Config{Logger: slog.New(sig)}))...), sig.trimmed
}

func waitTrim(t testing.TB, trimmed chan int64) int64 {
	t.Helper()
	select {
	case n := <-trimmed:
		return n
	case <-time.After(settletest.DefaultWait):
		t.Fatal("timed out waiting for the mount to trim its stream")
		return 0
	}
}

func TestStreamMountTrimsOnlyWhatEveryGroupAcknowledged(t *testing.T) {
	t.Parallel()
	h, trimmed := trimmedHarness(t)
	ctx := context.Background()
	in := h.Redis.Key("in")
	rdb := h.Redis.Client
	var ids []string
	for i := range 5 {
		ids = append(ids, h.Publish(in, i))
	}
	// Another service's group: it has read three entries and acknowledged two.
	if err := rdb.XGroupCreate(ctx, in, "audit", "0").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "a", Streams: []string{in, ">"}, Count: 3, Block: -1}).Result()
	if err != nil || len(res[0].Messages) != 3 {
		t.Fatalf("audit read %v, %v", res, err)
	}
	rdb.XAck(ctx, in, "audit", ids[0], ids[1])
	h.Mount(settle.Stream(rdb, in, "workers", settle.Trim(0)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	h.Start()
	h.WaitSettled(5)
	h.Advance(time.Minute) // the next turn to trim
	if n := waitTrim(t, trimmed); n != 2 {
		t.Fatalf("trimmed %d entries, want the 2 both groups acknowledged", n)
	}
	msgs, err := rdb.XRange(ctx, in, "-", "+").Result()
	if err != nil || len(msgs) != 3 || msgs[0].ID != ids[2] {
		t.Fatalf("left %v, %v; want the entries from audit's pending %s on", msgs, err, ids[2])
	}
}

func TestStreamMountTrimsAcknowledgedEntriesOnceOlderThanTheDefaultKeep(t *testing.T) {
	t.Parallel()
	h, trimmed := trimmedHarness(t)
	in := h.Redis.Key("in")
	h.Mount(settle.Stream(h.Redis.Client, in, "workers"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	h.Start()
	var last string
	for i := range 4 {
		last = h.Publish(in, i)
	}
	h.WaitSettled(4)
	h.Advance(settle.DefaultTrimKeep + 2*time.Minute)
	// The group's last-delivered entry is the bound: kept, the others trimmed.
	if n := waitTrim(t, trimmed); n != 3 {
		t.Fatalf("trimmed %d entries, want 3", n)
	}
	msgs, err := h.Redis.Client.XRange(context.Background(), in, "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].ID != last {
		t.Fatalf("left %v, %v; want the last entry alone", msgs, err)
	}
}

func TestStreamMountRefusesANegativeTrim(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	h.App.Mount(settle.Stream(h.Redis.Client, h.Redis.Key("in"), "g", settle.Trim(-time.Second)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	if err := h.App.Validate(); err == nil || !strings.Contains(err.Error(), "Trim") {
		t.Fatalf("Validate = %v, want a refusal naming Trim", err)
	}
}
