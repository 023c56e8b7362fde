package admin_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// An operator lists the dead letters of {refunds}.dlq grouped by error, then replays
// those whose error says "unavailable" back to the stream they came from.
func ExampleInspector_Replay() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// Dead letters as settle.DeadLetter writes them (here by hand).
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "{refunds}", Values: []any{"payload", "r0"}})
	for _, e := range []string{"processor unavailable: no answer", "card 4242 declined", "card 1881 declined"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "{refunds}.dlq", Values: []any{
			"payload", "r", settle.HeaderRetryCount, "5", settle.HeaderDeadSource, "{refunds}",
			settle.HeaderDeadReason, "max attempts reached (5 of 5)", settle.HeaderDeadError, e,
		}})
	}

	insp := admin.NewInspector(rdb)
	sum, err := insp.DeadLetterSummary(ctx, "{refunds}.dlq", admin.Filter{})
	if err != nil {
		panic(err)
	}
	for _, g := range sum.ByError {
		fmt.Printf("%d × %s\n", g.Count, g.Value)
	}
	res, err := insp.Replay(ctx, "{refunds}.dlq", admin.Filter{Error: "unavailable"}, admin.Rate(50))
	if err != nil {
		panic(err)
	}
	fmt.Printf("replayed %d to %s; %d dead letters left\n", len(res.Replayed), res.Replayed[0].To, rdb.XLen(ctx, "{refunds}.dlq").Val())
	// Output:
	// 2 × card <n> declined
	// 1 × processor unavailable: no answer
	// replayed 1 to {refunds}; 2 dead letters left
}
