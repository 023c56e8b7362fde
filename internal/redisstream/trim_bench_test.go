package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

// BenchmarkStreamDrainThenTrim drains 100,000 entries through a Stream mount with
// Trim(0) and reports the stream's length and memory (MEMORY USAGE … SAMPLES 0, on a
// real server) after the drain and after the next trim: what trimming saves a work
// queue. Run it once, on the server of SETTLE_REDIS_URL:
//
//	SETTLE_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench StreamDrainThenTrim -benchtime 1x .
func BenchmarkStreamDrainThenTrim(b *testing.B) {
	const n = 100_000
	for range b.N {
		h, trimmed := trimmedHarness(b, settletest.WaitTimeout(5*time.Minute))
		ctx := context.Background()
		in := h.Redis.Key("in")
		pub := settle.NewPublisher(h.Redis.Client)
		for i := range n {
			if _, err := pub.Publish(ctx, in, i); err != nil {
				b.Fatal(err)
			}
		}
		h.Mount(settle.Stream(h.Redis.Client, in, "workers", settle.Trim(0)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		h.Start()
		h.WaitSettled(n)
		before, beforeMem := h.Redis.Client.XLen(ctx, in).Val(), h.Redis.Client.MemoryUsage(ctx, in, 0).Val()
		h.Advance(time.Minute) // the next turn to trim
		waitTrim(b, trimmed)
		after, afterMem := h.Redis.Client.XLen(ctx, in).Val(), h.Redis.Client.MemoryUsage(ctx, in, 0).Val()
		b.ReportMetric(float64(before), "entries-drained")
		b.ReportMetric(float64(beforeMem)/1e6, "MB-drained")
		b.ReportMetric(float64(after), "entries-trimmed")
		b.ReportMetric(float64(afterMem)/1e6, "MB-trimmed")
	}
}
