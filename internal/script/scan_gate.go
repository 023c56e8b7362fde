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
