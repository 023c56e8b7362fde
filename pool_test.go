package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestRunWarnsWhenMountsHoldTheirClientsWholePool: mounts that share a client and hold,
// while they wait for work, as many connections as its pool has (a blocking read each)
// are warned about once when Run starts, with the numbers and the pool size to give;
// mounts that leave a connection free are not. Run goes on.
func TestRunWarnsWhenMountsHoldTheirClientsWholePool(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		pool     int
		warnings int
	}{{"PoolOfTwoForThreeMounts", 2, 1}, {"PoolOfFourForThreeMounts", 4, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := sourcetest.SetupStream(t)
			o := b.R.Client.Options()
			rdb := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, Password: o.Password, Username: o.Username, PoolSize: c.pool})
			t.Cleanup(func() { _ = rdb.Close() })
			app, err := settle.New(b.Config())
			if err != nil {
				t.Fatal(err)
			}
			app.Mount(settle.Stream(rdb, b.R.Key("a"), "g", settle.Block(sourcetest.TestBlock)), sourcetest.Ack)
			app.Mount(settle.ClaimingStream(rdb, b.R.Key("b"), "g", time.Minute, settle.Block(sourcetest.TestBlock)), sourcetest.Ack)
			app.Mount(settle.ReliableList(rdb, b.R.Key("c"), settle.Block(sourcetest.TestBlock)), sourcetest.Ack)
			stop := sourcetest.RunApp(t, app)
			// Run warns before any mount reads: once one settled, the warning is logged.
			if _, err := settle.NewPublisher(b.R.Client).Publish(context.Background(), b.R.Key("a"), 1); err != nil {
				t.Fatal(err)
			}
			b.Rec.WaitFor(t, sourcetest.WaitBound, "a settlement", func(evs []settle.Settled) bool { return len(evs) >= 1 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			got := b.Logs.Containing("hold 3 of them while they wait for work")
			if len(got) != c.warnings {
				t.Fatalf("%d warnings about the pool; want %d: %+v", len(got), c.warnings, got)
			}
			if c.warnings > 0 && (got[0].Attrs["pool_size"] != "2" || got[0].Attrs["held"] != "3") {
				t.Fatalf("warning %+v; want pool_size 2, held 3", got[0])
			}
		})
	}
}
