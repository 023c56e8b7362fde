package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed perms.lua
var permsSrc string

var perms = redis.NewScript(permsSrc)

// Refused returns the indexes in cmds of the commands the client's user may not run,
// each command its name and arguments, asked of the server's redis.acl_check_cmd in
// one script call that writes nothing. known is false when the server cannot tell (it
// has no redis.acl_check_cmd: miniredis, Redis 6); err is the call's error (a user
// who may not run scripts at all gets NOPERM here).
func Refused(ctx context.Context, rdb redis.Scripter, cmds [][]string) (refused []int, known bool, err error) {
	var args []any
	for _, c := range cmds {
		args = append(args, len(c))
		for _, a := range c {
			args = append(args, a)
		}
	}
	res, err := perms.Run(ctx, rdb, nil, args...).Result()
	if err != nil {
		return nil, false, fmt.Errorf("permissions script: %w", err)
	}
	if n, ok := res.(int64); ok && n == -1 {
		return nil, false, nil
	}
	list, ok := res.([]any)
	if !ok {
		return nil, false, fmt.Errorf("permissions script: unexpected reply %T", res)
	}
	for _, v := range list {
		if k, ok := v.(int64); ok && k >= 1 && int(k) <= len(cmds) {
			refused = append(refused, int(k)-1)
		}
	}
	return refused, true, nil
}
