package settle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
)

// perm is one command a Redis transport runs: its name and arguments shaped as the
// transport sends them, so that the ACL matches its keys and subcommand.
type perm []string

// String names the command and, when it has one, its key, as the error shows it.
func (p perm) String() string {
	name := p[0]
	if name == "XGROUP" || name == "XINFO" {
		name += " " + p[1]
		if len(p) > 2 {
			return name + " " + p[2]
		}
		return name
	}
	if len(p) > 1 && !strings.HasPrefix(name, "EVAL") && name != "TIME" && name != "MULTI" && name != "EXEC" && name != "WAIT" {
		return name + " " + p[1]
	}
	return name
}

// checkPerms asks the server, before a mount starts, whether the client's user may run
// every command the mount will run, and returns one error naming each it may not: a
// refusal is then reported when Run starts, not met again and again at run time (a
// settlement that fails leaves its message to come back and fail once more). The
// answer comes from redis.acl_check_cmd in one script that writes nothing (Redis 7,
// Valkey); a user who may not run scripts is asked about through ACL WHOAMI and ACL
// DRYRUN instead, if it may run those. A server that can tell neither way (miniredis,
// Redis 6, ACL commands refused too) is not checked: its refusals, if any, come at
// run time. An error of the call itself (the server unreachable) is returned as it is.
func checkPerms(ctx context.Context, rdb redis.UniversalClient, perms []perm) error {
	cmds := make([][]string, len(perms))
	for i, p := range perms {
		cmds[i] = p
	}
	refused, known, err := script.Refused(ctx, rdb, cmds)
	if err != nil && strings.Contains(err.Error(), "NOPERM") {
		refused, known, err = dryRun(ctx, rdb, perms)
	}
	if err != nil || !known || len(refused) == 0 {
		return err
	}
	names := make([]string, len(refused))
	for i, k := range refused {
		names[i] = perms[k].String()
	}
	return fmt.Errorf("%w: the Redis user may not run %s", ErrPermission, strings.Join(names, ", "))
}

// ErrPermission is the error of a mount whose Redis user may not run every command the
// mount needs (checked when Run opens it): the message names each one refused.
var ErrPermission = errors.New("settle: missing Redis permissions")

// dryRun asks ACL DRYRUN, as the client's user (ACL WHOAMI), about each command: for
// a user who may not run scripts. known is false when the user may not run these
// either, or the server has no ACL DRYRUN: then only the scripts' own refusal is known.
func dryRun(ctx context.Context, rdb redis.UniversalClient, perms []perm) (refused []int, known bool, err error) {
	user, werr := rdb.Do(ctx, "ACL", "WHOAMI").Text()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(perms))
	for i, p := range perms {
		args := []any{"ACL", "DRYRUN", user}
		for _, a := range p {
			args = append(args, a)
		}
		cmds[i] = pipe.Do(ctx, args...)
	}
	if werr == nil {
		_, werr = pipe.Exec(ctx)
	}
	if werr != nil {
		// Scripts refused and no way to ask about the rest: name the scripts alone.
		for i, p := range perms {
			if strings.HasPrefix(p[0], "EVAL") {
				refused = append(refused, i)
			}
		}
		return refused, true, nil
	}
	for i, c := range cmds {
		if s, _ := c.Text(); s != "OK" {
			refused = append(refused, i)
		}
	}
	return refused, true, nil
}

// scriptPerms are the commands of the scripts every Redis transport runs through
// go-redis (EVALSHA, then EVAL when the server does not have the script yet), and
// TIME, which they read "now" from.
func scriptPerms() []perm {
	return []perm{{"EVALSHA", "0000000000000000000000000000000000000000", "0"}, {"EVAL", "return 1", "0"}, {"TIME"}}
}

// delayPerms are the commands on a mount's durable delay set (parks and sweeps), none
// without one.
func delayPerms(d delaySet, parks bool) []perm {
	if !parks {
		return nil
	}
	set := d.Key
	ps := []perm{{"TYPE", set}, {"ZADD", set, "0", "m"}, {"ZREM", set, "m"}, {"ZRANGEBYSCORE", set, "-inf", "0"}, {"ZRANGE", set, "0", "0"}}
	if d.TTL > 0 {
		ps = append(ps, perm{"PEXPIRE", set, "1"})
	}
	return ps
}

// perms are the commands a stream consumer runs: reads, settlement scripts and what
// they run, the take-over of idle entries (claim, touch, prune), the trim of what every
// group acknowledged (unless NoTrim), the pause key, the dead letter and the delay set.
func (t *streamTransport) perms() []perm {
	key, group, c := t.src.key, t.src.group, t.consumer
	ps := append(scriptPerms(),
		perm{"XGROUP", "CREATE", key, group, "0", "MKSTREAM"},
		perm{"XREADGROUP", "GROUP", group, c, "COUNT", "1", "STREAMS", key, "0"},
		perm{"XACK", key, group, "0-1"},
		perm{"XADD", key, "*", "f", "v"},
		perm{"XPENDING", key, group, "-", "+", "1", c},
		perm{"XCLAIM", key, group, c, "0", "0-1"},
		perm{"TYPE", key},
		perm{"EXISTS", keys.Paused(key, group)},
	)
	if t.claim != nil {
		ps = append(ps, perm{"XAUTOCLAIM", key, group, c, "0", "0-0"}, perm{"XINFO", "CONSUMERS", key, group},
			perm{"XGROUP", "DELCONSUMER", key, group, c})
		gate := keys.Derived(key, "claim-scan:"+group)
		ps = append(ps, perm{"HGET", gate, "at"}, perm{"HSET", gate, "at", "0"}, perm{"PEXPIRE", gate, "1"})
	}
	if !t.src.cfg.trimOff {
		ps = append(ps, perm{"XINFO", "GROUPS", key}, perm{"XPENDING", key, group}, perm{"XTRIM", key, "MINID", "0-1"})
	}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, perm{"XADD", dl, "*", "f", "v"}, perm{"TYPE", dl})
	}
	return append(ps, delayPerms(t.delays, t.parks)...)
}

// perms are the commands a reliable list consumer runs: its moves into and out of its
// processing list, its heartbeat and consumer set, the recovery of dead consumers'
// lists, the pause key, the dead letter and the delay set.
func (t *reliableTransport) perms() []perm {
	key, proc := t.src.key, t.processing
	ps := append(scriptPerms(),
		perm{"LMOVE", key, proc, "LEFT", "RIGHT"}, perm{"BLMOVE", key, proc, "LEFT", "RIGHT", "0"},
		perm{"LREM", proc, "1", "v"}, perm{"RPUSH", key, "v"}, perm{"LRANGE", proc, "0", "-1"}, perm{"LLEN", proc},
		perm{"TYPE", key}, perm{"MULTI"}, perm{"EXEC"},
		perm{"SET", t.heartbeat, "1", "PX", "1"}, perm{"EXISTS", t.heartbeat}, perm{"DEL", t.heartbeat},
		perm{"SADD", t.consumers, "c"}, perm{"SREM", t.consumers, "c"}, perm{"SMEMBERS", t.consumers},
		perm{"EXISTS", keys.Paused(key, "")},
	)
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, perm{"RPUSH", dl, "v"}, perm{"TYPE", dl})
	}
	return append(ps, delayPerms(t.delays, t.parks)...)
}

// perms are the commands a plain list consumer runs: its pops, its copies and dead
// letters, the pause key and the delay set.
func (t *listTransport) perms() []perm {
	key := t.src.key
	ps := []perm{{"BLPOP", key, "0"}, {"LPOP", key, "1"}, {"RPUSH", key, "v"}, {"EXISTS", keys.Paused(key, "")}}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, perm{"RPUSH", dl, "v"})
	}
	if t.parks {
		ps = append(append(ps, scriptPerms()...), perm{"TYPE", key})
	}
	return append(ps, delayPerms(t.delays, t.parks)...)
}

// perms are the commands a pub/sub consumer runs: its subscription, its retry copies and
// dead letters, and the delay set.
func (t *pubsubTransport) perms() []perm {
	s := t.src
	sub := perm{"SUBSCRIBE", s.name}
	if s.pattern {
		sub = perm{"PSUBSCRIBE", s.name}
	}
	ps := []perm{sub, {"PUBLISH", t.retryChannel(), "v"}}
	if dl := t.env.Policy.DeadLetter; dl != "" {
		ps = append(ps, perm{"PUBLISH", dl, "v"})
	}
	if t.parks {
		ps = append(ps, scriptPerms()...)
	}
	return append(ps, delayPerms(t.delays, t.parks)...)
}
