package redispubsub

import (
	"context"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/source"
)

// TestPubSubDeliveryIDsAreUniqueAcrossRestarts: two transports of one channel, as two
// processes (or one restarted) make them, never name their first deliveries alike (both
// were "1").
func TestPubSubDeliveryIDsAreUniqueAcrossRestarts(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{})
	t.Cleanup(func() { _ = rdb.Close() })
	env := source.Env{Logger: slog.New(slog.DiscardHandler), Mount: "events"}
	m := &redis.Message{Channel: "events", Payload: "x"}
	before := New(env, Config{Client: rdb, Name: "events"}).(*transport).delivery(context.Background(), m)
	after := New(env, Config{Client: rdb, Name: "events"}).(*transport).delivery(context.Background(), m)
	if before.ID == after.ID {
		t.Fatalf("both processes' first deliveries are named %q", after.ID)
	}
}
