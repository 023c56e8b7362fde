package soak

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/script"
)

// crashSpec makes a soak worker a crash-point worker (workerConfig.Crash): its handler
// plays the crash-point life (crashHandler), every settlement call of its Redis client
// and of its inbox's database goes through a crasher, which records the points reached
// and kills the process at Point.
type crashSpec struct {
	// Point is where the process kills itself with SIGKILL ("before xack#1",
	// "after stream_move#2": see crasher); empty: never.
	Point string
	// Record is a file every point reached is appended to, one line each; empty: none.
	Record string
}

// crashLife is the id of the message whose life goes through every settlement path of
// a transport; every other message is acked.
const crashLife = "A"

// crashDelay is the RetryAfter delay of the crash-point life.
const crashDelay = 50 * time.Millisecond

// crashHandler plays the crash-point life: message crashLife is retried (Retry) at every
// attempt but the one before the cap, where it asks RetryAfter(crashDelay), so that at
// the cap it is dead-lettered; every other message is acked, or, with reply, answered
// with a reply (to the mount's ReplyTo) that completes it.
func crashHandler(cap int, reply bool) settle.Handler {
	return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		switch {
		case messageID(m) != crashLife && reply:
			return m.Reply("paid " + messageID(m))
		case messageID(m) != crashLife:
			return nil
		case m.Attempt == cap-1:
			return settle.RetryAfter(crashDelay, errors.New("crash point: retry after"))
		default:
			return settle.Retry(errors.New("crash point: retry"))
		}
	})
}

// crasher numbers a process's settlement calls and kills the process at its crash point.
//
// A settlement call is one Redis command, script or pipeline, or one SQL statement, of a
// settlement path, named after what it runs (a script by its file name, a pipeline by
// the names of its settlement commands joined by "+"); calls of one name are numbered
// from 1 in the order they start. An unconditional call (one that settles what the engine
// asked: an ack, a retry copy, a park, a dead letter, a claiming stream's leave) has two
// points, "before NAME#N" (about to be sent) and "after NAME#N" (its reply received, not
// yet returned to the transport). A conditional call, run on every read and moving
// nothing most of the time (a sweep of due delays, a claim of idle entries or expired
// leases, a recovery of a dead consumer's list), is numbered and has its "after" point
// only when it moved something; it has no "before" point: the state just before it is
// the state after the settlement call before it (nothing else writes), which that
// call's "after" point covers (after a park, the delay set holds the member the sweep
// would move).
type crasher struct {
	point string
	ready sync.Once
	rec   *os.File

	mu sync.Mutex
	n  map[string]int
}

func newCrasher(spec *crashSpec) (*crasher, error) {
	c := &crasher{point: spec.Point, n: map[string]int{}}
	if spec.Record != "" {
		f, err := os.OpenFile(spec.Record, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		c.rec = f
	}
	return c, nil
}

// reach records point p and, if it is the crash point, kills the process; c.mu is held,
// so no other point is recorded after the crash point.
func (c *crasher) reach(p string) {
	if c.rec != nil {
		if _, err := c.rec.WriteString(p + "\n"); err != nil {
			panic(err)
		}
	}
	if p == c.point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the engine never sees the call return
	}
}

// call runs the settlement call name through do, with its points: "before" unless
// conditional, "after" unless conditional and moved reports false.
func (c *crasher) call(name string, conditional bool, do func() error, moved func() bool) error {
	k := 0
	if !conditional {
		k = c.before(name)
	}
	err := do()
	if !conditional || moved() {
		c.after(name, k)
	}
	return err
}

// before numbers an unconditional call of name and reaches its "before" point; it
// returns the call's number.
func (c *crasher) before(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[name]++
	k := c.n[name]
	c.reach(fmt.Sprintf("before %s#%d", name, k))
	return k
}

// after reaches the "after" point of call k of name; k 0 numbers a conditional call
// that moved something now.
func (c *crasher) after(name string, k int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k == 0 {
		c.n[name]++
		k = c.n[name]
	}
	c.reach(fmt.Sprintf("after %s#%d", name, k))
}

// crashReady is the line a crasher records at the process's first read: its sources
// are open, its fetch loop runs, and a SIGTERM is a graceful stop (before, it may cut an
// Open short, which fails the run).
const crashReady = "ready"

// reading records crashReady, once.
func (c *crasher) reading() {
	c.ready.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.rec != nil {
			if _, err := c.rec.WriteString(crashReady + "\n"); err != nil {
				panic(err)
			}
		}
	})
}

// note records a line that is not a point (a sign the numbering may be off).
func (c *crasher) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec != nil {
		_, _ = c.rec.WriteString("note " + s + "\n")
	}
}

// The settlement scripts, by the name of their .lua file in internal/script.
var (
	// unconditionalScripts settle what the engine asked for.
	unconditionalScripts = []string{"stream_move", "park", "value_park", "list_move", "list_done", "stream_reply", "list_reply"}
	// conditionalScripts run on every read (or heartbeat) and usually move nothing.
	conditionalScripts = []string{"sweep", "list_sweep", "channel_sweep", "claim", "list_recover"}
)

// crashHook is the go-redis hook that runs a worker's settlement calls through its
// crasher. Reads (XREADGROUP, BLMOVE or the list_take script into a processing list,
// LMOVE, LRANGE, XPENDING),
// heartbeats (the touch script outside a claiming stream's Leave, SET/SADD) and group
// creation are not settlement calls.
type crashHook struct {
	c       *crasher
	scripts map[string]string // SHA1 -> script name
}

var _ redis.Hook = crashHook{}

// newCrashHook names each of internal/script's scripts by its SHA1, which is what
// EVALSHA sends.
func newCrashHook(c *crasher) crashHook {
	h := crashHook{c: c, scripts: map[string]string{}}
	for name, src := range script.Sources() {
		h.scripts[sha1Hex(src)] = name
	}
	return h
}

// hookRedis adds the crash hook to rdb (nothing for a nil crasher).
func (c *crasher) hookRedis(rdb *redis.Client) {
	if c != nil {
		rdb.AddHook(newCrashHook(c))
	}
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (h crashHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h crashHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.read(cmd)
		name, cond := h.classify(cmd)
		if name == "" {
			return next(ctx, cmd)
		}
		err := h.c.call(name, cond, func() error { return next(ctx, cmd) }, func() bool { return moved(name, cmd) })
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.c.note("NOSCRIPT " + name) // the test preloads the scripts: this shifts the numbering
		}
		return err
	}
}

// ProcessPipelineHook: a pipeline is one call, named by its settlement commands.
func (h crashHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		cond := true
		for _, cmd := range cmds {
			h.read(cmd)
			n, c := h.classify(cmd)
			if n == "" {
				continue
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
			cond = cond && c
		}
		if len(names) == 0 {
			return next(ctx, cmds)
		}
		slices.Sort(names)
		name := strings.Join(names, "+")
		return h.c.call(name, cond, func() error { return next(ctx, cmds) }, func() bool {
			for _, cmd := range cmds {
				if n, _ := h.classify(cmd); n != "" && moved(n, cmd) {
					return true
				}
			}
			return false
		})
	}
}

// read notes the first read of new messages (see crashReady).
func (h crashHook) read(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "xreadgroup", "lmove", "blmove":
		h.c.reading()
	case "evalsha", "eval":
		if h.script(cmd) == "list_take" {
			h.c.reading()
		}
	}
}

// script names the script an EVALSHA or EVAL cmd runs: its file name, or "" for a
// script the hook does not know.
func (h crashHook) script(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	ref, _ := args[1].(string)
	if strings.ToLower(cmd.Name()) == "eval" {
		ref = sha1Hex(ref)
	}
	return h.scripts[ref]
}

// classify names a settlement command ("" for any other) and says whether it is
// conditional. A script the hook does not know is an unconditional call named by its
// SHA1, so that the test's list of points shows it.
func (h crashHook) classify(cmd redis.Cmder) (name string, conditional bool) {
	args := cmd.Args()
	switch strings.ToLower(cmd.Name()) {
	case "xack", "lrem":
		return strings.ToLower(cmd.Name()), false
	case "evalsha", "eval":
		if len(args) < 2 {
			return "", false
		}
		script := h.script(cmd)
		switch {
		case script == "":
			ref, _ := args[1].(string)
			if strings.ToLower(cmd.Name()) == "eval" {
				ref = sha1Hex(ref)
			}
			return "script:" + ref, false
		case slices.Contains(unconditionalScripts, script):
			return script, false
		case slices.Contains(conditionalScripts, script):
			return script, true
		case script == "touch" && calledFrom("/internal/redisstream.(*claimTransport).leave"):
			// A claiming stream's retry: the entry is left pending, its idle time reset.
			// Every other touch is a heartbeat of entries in flight.
			return script, false
		}
	}
	return "", false
}

// moved reports whether a conditional call moved something, from its reply.
func moved(name string, cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok || c.Err() != nil {
		return false
	}
	switch name {
	case "sweep", "list_sweep", "channel_sweep": // {moved, next, now[, unheard]}
		vals, _ := c.Val().([]any)
		n, _ := firstInt(vals)
		return n > 0
	case "claim": // {cursor, entries, counts, deleted}
		vals, _ := c.Val().([]any)
		if len(vals) < 2 {
			return false
		}
		entries, _ := vals[1].([]any)
		return len(entries) > 0
	case "list_recover": // the positions of the items taken, or -1
		taken, _ := c.Val().([]any)
		return len(taken) > 0
	}
	return false
}

func firstInt(vals []any) (int64, bool) {
	if len(vals) == 0 {
		return 0, false
	}
	n, ok := vals[0].(int64)
	return n, ok
}

// calledFrom reports whether the calling goroutine's stack holds the function whose
// name ends with fn.
func calledFrom(fn string) bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}
