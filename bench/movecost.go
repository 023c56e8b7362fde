package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// leastMove is the least Lua script that moves a batch as stream_move does: one XADD per
// move from its arguments, then one XACK of the batch; no owner check, no permission or
// size check, nothing undone on a failure. What it costs is what any atomic move in Lua
// costs on the server measured.
var leastMove = redis.NewScript(`
local acks, i = {}, 2
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 2, i + 1 + n))
  acks[#acks + 1] = ARGV[i]
  i = i + 2 + n
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(acks))
return #acks`)

// moveWay is one way -movecost writes a batch of retry copies of pending entries.
type moveWay struct {
	name, what string
	cmds       []string // the commands whose time INFO commandstats counts for it (a script's own count its calls)
	write      func(ctx context.Context, rdb *redis.Client, key, group, consumer string, ids []string, values [][]any) error
}

var moveWays = []moveWay{
	{"pipeline", "XADD per copy + one XACK, pipelined (the raw copy: not atomic, no owner check)", []string{"xadd", "xack"},
		func(ctx context.Context, rdb *redis.Client, key, group, _ string, ids []string, values [][]any) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, v := range values {
					p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: v})
				}
				p.XAck(ctx, key, group, ids...)
				return nil
			})
			return err
		}},
	{"least-lua", "the least Lua script: XADD per copy + one XACK (atomic, no owner check)", []string{"evalsha", "eval"},
		func(ctx context.Context, rdb *redis.Client, key, group, _ string, ids []string, values [][]any) error {
			args := []any{group}
			for i, v := range values {
				args = append(args, ids[i], len(v))
				args = append(args, v...)
			}
			return leastMove.Run(ctx, rdb, []string{key}, args...).Err()
		}},
	{"stream_move", "settle's stream_move.lua (atomic per move, owner checked, nothing half done)", []string{"evalsha", "eval"},
		func(ctx context.Context, rdb *redis.Client, key, group, consumer string, ids []string, values [][]any) error {
			moves := make([]script.Move, len(ids))
			for i := range ids {
				moves[i] = script.Move{ID: ids[i], Values: values[i]}
			}
			for _, err := range script.StreamMoves(ctx, rdb, key, key, group, consumer, 0, moves) {
				if err != nil {
					return err
				}
			}
			return nil
		}},
}

// runMoveCost measures what one retry copy costs the server, three ways (moveWays), each
// run moving n pending entries (100-byte payloads, settle's copy fields) in batches of
// batch, the ways taking turns run by run: the server's CPU per move (/proc, when the
// server is local) and the time INFO commandstats counts in the commands themselves
// (no parsing or replies).
func runMoveCost(ctx context.Context, cfg config, batch int) error {
	srv, admin, done, err := redisServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	rdb := srv.client(cfg.pool)
	defer rdb.Close()
	fmt.Printf("cost of one retry copy on the server: %d entries pending to one consumer, moved in batches of %d; median of %d runs; server %s\n",
		cfg.n, batch, cfg.runs, srv.opts.Addr)
	cpu := make([][]float64, len(moveWays))
	counted := make([][]float64, len(moveWays))
	for run := 0; run < cfg.runs; run++ {
		for w, way := range moveWays {
			c, u, err := moveCostRun(ctx, srv, rdb, admin, way, cfg.n, batch)
			if err != nil {
				return fmt.Errorf("%s: %w", way.name, err)
			}
			cpu[w], counted[w] = append(cpu[w], c), append(counted[w], u)
		}
	}
	fmt.Printf("%-12s %16s %16s %12s %14s  %s\n", "way", "server CPU us", "commands us", "CPU ÷ pipe", "counted ÷ pipe", "what")
	pipeCPU, pipeCounted := median(cpu[0]), median(counted[0])
	for w, way := range moveWays {
		c, u := median(cpu[w]), median(counted[w])
		fmt.Printf("%-12s %16.2f %16.2f %11.2fx %13.2fx  %s\n", way.name, c, u, c/pipeCPU, u/pipeCounted, way.what)
	}
	fmt.Println("(us per move; server CPU is 0 when the server is not local)")
	return nil
}

// moveCostRun is one run of way: it makes n entries pending to one consumer, then moves
// them all, returning the server's CPU and the commands' own time per move, in µs.
func moveCostRun(ctx context.Context, srv *server, rdb, admin *redis.Client, way moveWay, n, batch int) (cpu, counted float64, err error) {
	tok := token()
	key, group, consumer := "movecost:"+tok, "g", "settle-bench-"+tok
	defer func() { _, _ = deleteKeys(context.WithoutCancel(ctx), admin, tok) }()
	if err := publishStream(ctx, rdb, key, n, func(i int) []any { return []any{wire.FieldPayload, payload(i)} }); err != nil {
		return 0, 0, err
	}
	if err := rdb.XGroupCreate(ctx, key, group, "0").Err(); err != nil {
		return 0, 0, err
	}
	var ids []string
	var values [][]any
	for len(ids) < n {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{key, ">"}, Count: 1000, Block: -1}).Result()
		if err != nil {
			return 0, 0, err
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			return 0, 0, fmt.Errorf("%d entries read of the %d published", len(ids), n)
		}
		for _, m := range res[0].Messages {
			p, _ := m.Values[wire.FieldPayload].(string)
			ids = append(ids, m.ID)
			values = append(values, wire.AppendStreamValues(nil, []byte(p), map[string]string{
				wire.HeaderOriginID: m.ID, wire.HeaderRetryCount: "1",
			}))
		}
	}
	before, err := commandStat(ctx, admin, "usec")
	if err != nil {
		return 0, 0, err
	}
	cpu0, cpuErr := serverCPU(srv.pid)
	for at := 0; at < n; at += batch {
		end := min(at+batch, n)
		if err := way.write(ctx, rdb, key, group, consumer, ids[at:end], values[at:end]); err != nil {
			return 0, 0, err
		}
	}
	cpu1, _ := serverCPU(srv.pid)
	after, err := commandStat(ctx, admin, "usec")
	if err != nil {
		return 0, 0, err
	}
	if left, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: "-", End: "+", Count: 1}).Result(); err != nil || len(left) > 0 {
		return 0, 0, fmt.Errorf("entries left pending after the moves (%v)", err)
	}
	var us int64
	for _, name := range way.cmds {
		us += after[name] - before[name]
	}
	if cpuErr == nil {
		cpu = float64((cpu1-cpu0)/time.Microsecond) / float64(n)
	}
	return cpu, float64(us) / float64(n), nil
}
