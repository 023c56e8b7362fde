package redisbase

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
)

// Perm is one command a Redis transport runs: its name and arguments shaped as the
// transport sends them, so that the ACL matches its keys and subcommand.
type Perm []string

// String names the command and, when it has one, its key, as the error shows it.
func (p Perm) String() string {
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

// CheckPerms asks the server, before a mount starts, whether the client's user may run
// every command the mount will run, and returns one error naming each it may not: a
// refusal is then reported when Run starts, not met again and again at run time (a
// settlement that fails leaves its message to come back and fail once more). The
// answer comes from redis.acl_check_cmd in one script that writes nothing (Redis 7,
// Valkey); a user who may not run scripts is asked about through ACL WHOAMI and ACL
// DRYRUN instead, if it may run those. A server that can tell neither way (miniredis,
// Redis 6, ACL commands refused too) is not checked: its refusals, if any, come at
// run time. An error of the call itself (the server unreachable) is returned as it is.
func CheckPerms(ctx context.Context, rdb redis.UniversalClient, perms []Perm) error {
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
// mount needs. settle declares it as settle.ErrPermission and sets this variable to it
// when it starts, so that errors.Is matches the public sentinel.
var ErrPermission = errors.New("settle: missing Redis permissions")

// dryRun asks ACL DRYRUN, as the client's user (ACL WHOAMI), about each command: for
// a user who may not run scripts. known is false when the user may not run these
// either, or the server has no ACL DRYRUN: then only the scripts' own refusal is known.
func dryRun(ctx context.Context, rdb redis.UniversalClient, perms []Perm) (refused []int, known bool, err error) {
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

// ScriptPerms are the commands of the scripts every Redis transport runs through
// go-redis (EVALSHA, then EVAL when the server does not have the script yet), and
// TIME, which they read "now" from.
func ScriptPerms() []Perm {
	return []Perm{{"EVALSHA", "0000000000000000000000000000000000000000", "0"}, {"EVAL", "return 1", "0"}, {"TIME"}}
}

// DelayPerms are the commands on a mount's durable delay set (parks and sweeps), none
// without one.
func DelayPerms(d DelaySet, parks bool) []Perm {
	if !parks {
		return nil
	}
	set := d.Key
	ps := []Perm{{"TYPE", set}, {"ZADD", set, "0", "m"}, {"ZREM", set, "m"}, {"ZRANGEBYSCORE", set, "-inf", "0"}, {"ZRANGE", set, "0", "0"}}
	if d.TTL > 0 {
		ps = append(ps, Perm{"PEXPIRE", set, "1"})
	}
	return ps
}
