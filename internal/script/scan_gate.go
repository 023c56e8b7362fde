package script

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scan_gate.lua
	scanGateSrc string

	scanGate = redis.NewScript(nowSrc + scanGateSrc)

	//go:embed prune.lua
	pruneSrc string
	prune    = redis.NewScript(pruneSrc)
)

// StartScan reports whether consumer may start a pass over its group's pending list,
// recording its start in the group's scan key when it may: one consumer of a group
// starts a pass per period (see scan_gate.lua).
func StartScan(ctx context.Context, rdb redis.Scripter, key, consumer string, period time.Duration) (bool, error) {
	n, err := scanGate.Run(ctx, rdb, []string{key}, max(period.Milliseconds(), 1), consumer).Int()
	if err != nil {
		return false, fmt.Errorf("scan gate script: %w", err)
	}
	return n == 1, nil
}

// PruneConsumers removes from stream's group the consumers other than self that hold
// no pending entry and have been idle for at least idle, in one script (see prune.lua),
// and returns their names.
func PruneConsumers(ctx context.Context, rdb redis.Scripter, stream, group, self string, idle time.Duration) ([]string, error) {
	names, err := prune.Run(ctx, rdb, []string{stream}, group, self, max(idle.Milliseconds(), 1)).StringSlice()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("prune script: %w", err)
	}
	return names, nil
}
