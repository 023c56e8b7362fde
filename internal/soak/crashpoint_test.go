package soak

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/ledger"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/wire"
)

// crashAcked is the id of the message that is acked in every crash-point run.
const crashAcked = "B"

// crashGhost is the consumer that left message crashLife pending (a stream entry, a
// reliable list item, a row whose lease passed) before the worker starts: the worker's
// first settlement of it is a reclaim.
const crashGhost = "ghost"

// crashParallel bounds the crash-point runs under way at once (each runs one worker
// process at a time; most of a run is spent waiting for idle times to pass).
const crashParallel = 6

// crashCase is one transport's crash-point life: message crashLife, left by a dead
// consumer, is reclaimed, then handled by crashHandler until the cap dead-letters it
// (through every retry path the transport has), while message crashAcked is acked.
type crashCase struct {
	name      string
	transport string
	cap       int
	idle      time.Duration // Reclaim / min-idle / heartbeat / lease
	// points are the settlement calls of the life, as its recording run must list them
	// (see crasher for their names and numbering), in no particular order: message
	// crashAcked's ack interleaves with crashLife's calls.
	points []string
	// reply: message crashAcked is answered with a reply to a key of its own, which
	// completes it in the same script; the run then checks the reply key holds exactly
	// one reply (none without the completion, none written twice).
	reply bool
}

func crashCases() []crashCase {
	return []crashCase{{
		// The ghost's delivery counts: reclaimed at attempt 2, Retry: a copy; attempt 3
		// RetryAfter: an in-process delay, then a copy; attempt 4: the dead letter. Copies
		// and dead letters are the stream_move script.
		name: "StreamReclaim", transport: transportStream, cap: 4, idle: 300 * time.Millisecond,
		points: []string{"after claim#1",
			"before stream_move#1", "after stream_move#1", // retry copy
			"before stream_move#2", "after stream_move#2", // copy of the in-process delay, when due
			"before stream_move#3", "after stream_move#3", // dead letter
			"before xack#1", "after xack#1"},
	}, {
		// As StreamReclaim, the delay parked in the delay set and swept back into the stream.
		name: "StreamDurableZset", transport: transportZset, cap: 4, idle: 300 * time.Millisecond,
		points: []string{"after claim#1",
			"before stream_move#1", "after stream_move#1", // retry copy
			"before park#1", "after park#1", "after sweep#1", // RetryAfter: park, then sweep when due
			"before stream_move#2", "after stream_move#2", // dead letter
			"before xack#1", "after xack#1"},
	}, {
		// The ghost's delivery counts: claimed at attempt 2, which asks RetryAfter: the entry
		// is left pending (touch) and claimed back at attempt 3, the dead letter.
		name: "ClaimingStream", transport: transportClaiming, cap: 3, idle: 300 * time.Millisecond,
		points: []string{"after claim#1",
			"before touch#1", "after touch#1", "after claim#2", // leave, claimed back
			"before stream_move#1", "after stream_move#1", // dead letter
			"before xack#1", "after xack#1"},
	}, {
		// The ghost's processing list is recovered (its item back to the list, retry count
		// 1); attempt 2 Retry: a copy; attempt 3 RetryAfter: an in-process delay, then a
		// copy; attempt 4: the dead letter. Each is the list_move script; the ack the
		// list_done script.
		name: "ReliableList", transport: transportReliable, cap: 4, idle: 300 * time.Millisecond,
		points: []string{"after list_recover#1",
			"before list_move#1", "after list_move#1", // retry copy
			"before list_move#2", "after list_move#2", // copy of the in-process delay, when due
			"before list_move#3", "after list_move#3", // dead letter
			"before list_done#1", "after list_done#1"},
	}, {
		// As StreamReclaim, message crashAcked answered with a reply: the stream_reply
		// script appends it and acknowledges the entry in one step.
		name: "StreamReply", transport: transportStream, cap: 4, idle: 300 * time.Millisecond, reply: true,
		points: []string{"after claim#1",
			"before stream_move#1", "after stream_move#1",
			"before stream_move#2", "after stream_move#2",
			"before stream_move#3", "after stream_move#3",
			"before stream_reply#1", "after stream_reply#1"},
	}, {
		// As ReliableList, message crashAcked answered with a reply: the list_reply script
		// takes its item and pushes the reply in one step.
		name: "ReliableListReply", transport: transportReliable, cap: 4, idle: 300 * time.Millisecond, reply: true,
		points: []string{"after list_recover#1",
			"before list_move#1", "after list_move#1",
			"before list_move#2", "after list_move#2",
			"before list_move#3", "after list_move#3",
			"before list_reply#1", "after list_reply#1"},
	}, {
		// The ghost's row, its lease passed, is taken over by one claim (one more attempt:
		// 2), the other row claimed by another (a takeover is a claim of its own); attempt
		// 2 Retry: put back; claimed again; attempt 3 RetryAfter: parked in its row;
		// claimed again when due; attempt 4: moved to the dead group.
		name: "InboxPostgres", transport: transportInbox, cap: 4, idle: time.Second,
		points: []string{"after sql_claim#1", "after sql_claim#2",
			"before sql_put_back#1", "after sql_put_back#1", "after sql_claim#3",
			"before sql_park#1", "after sql_park#1", "after sql_claim#4",
			"before sql_dead_letter#1", "after sql_dead_letter#1",
			"before sql_ack#1", "after sql_ack#1"},
	}, {
		// As InboxPostgres, message crashAcked answered with a reply: a row of the group
		// "replies" inserted in the transaction that deletes the answered row.
		name: "InboxReply", transport: transportInbox, cap: 4, idle: time.Second, reply: true,
		points: []string{"after sql_claim#1", "after sql_claim#2",
			"before sql_put_back#1", "after sql_put_back#1", "after sql_claim#3",
			"before sql_park#1", "after sql_park#1", "after sql_claim#4",
			"before sql_dead_letter#1", "after sql_dead_letter#1",
			"before commit:sql_reply+sql_ack#1", "after commit:sql_reply+sql_ack#1"},
	}}
}

// TestCrashPointsLeaveEachMessageInExactlyOnePlace: a worker process killed with
// SIGKILL right before or right after any one settlement call (see crasher) leaves,
// once a fresh worker has drained the transport, each message in exactly one place: the
// life's message in exactly one dead letter, the other acked; nothing pending, left in
// a stream unread, in a list, processing list or delay set, or leased.
//
// Per transport (crashCases), a recording run first plays the life without a crash and
// lists its settlement calls, which must be the case's points. Then, for every point,
// on fresh keys (or a fresh table): the dead consumer's leftover and the two messages
// are set up, a worker runs until it kills itself at the point (it must reach it), a
// fresh worker drains, and the ledger (internal/ledger) and a direct look at Redis or
// the table judge the result. Stream+Reclaim (in-process delays), Stream+DurableZset,
// ClaimingStream and ReliableList need a real Redis (SETTLE_REDIS_URL), the SQL inbox
// PostgreSQL (SETTLE_POSTGRES_URL), as the soaks do; each part skips without its server.
//
// A conditional call (a sweep, a claim, a recovery: run on every read, moving nothing
// most of the time) has only its "after" point, and only when it moved something: a
// crash just before it leaves the state the settlement call before it left, which that
// call's "after" point covers (after a park, the member the sweep would move is in the
// delay set). Moves into a reliable list's processing list and XREADGROUP are reads, not
// settlements (a crash after them is a crash with a delivery in flight, which the soaks
// cover at random).
func TestCrashPointsLeaveEachMessageInExactlyOnePlace(t *testing.T) {
	env := &crashEnv{dir: t.TempDir()}
	t.Cleanup(env.killAll)
	skip := map[string]string{}
	var rs *redistest.Redis
	if redistest.Real() {
		rs = redistest.New(t)
		env.rdb = rs.Client
		if err := preloadScripts(rs.Client); err != nil {
			t.Fatal(err)
		}
	}
	pgURL := os.Getenv("SETTLE_POSTGRES_URL")
	if pgURL != "" {
		db, err := sql.Open("pgx", pgURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		env.db = db
	}
	if rs == nil && pgURL == "" {
		t.Skipf("needs a real Redis (%s) or PostgreSQL (SETTLE_POSTGRES_URL), as the soaks do", redistest.EnvURL)
	}

	// Every run's subject is made here, on the test's goroutine (an inbox table is the
	// test's, dropped when it ends); the runs go on in parallel.
	cases := crashCases()
	runs := map[string][]*crashRun{} // by case: the recording run, then one per point
	var all []*crashRun
	for _, c := range cases {
		switch {
		case c.transport == transportInbox && pgURL == "":
			skip[c.name] = "needs PostgreSQL: set SETTLE_POSTGRES_URL (e.g. postgres://root@127.0.0.1:5432/test?sslmode=disable)"
			continue
		case c.transport != transportInbox && rs == nil:
			skip[c.name] = fmt.Sprintf("needs a real Redis: set %s (e.g. redis://127.0.0.1:6379/0)", redistest.EnvURL)
			continue
		}
		for i, point := range append([]string{""}, c.points...) {
			var s subject
			if c.transport == transportInbox {
				s = inboxSubject(t)
				if c.reply {
					s.cfg.Reply = "replies"
				}
			} else {
				prefix := fmt.Sprintf("%s%d:", c.name, i) // by case: two cases share a transport
				s = redisSubjectOn(rs.Client, os.Getenv(redistest.EnvURL), func(name string) string { return rs.Key(prefix + name) }, c.transport)
				if c.reply {
					s.cfg.Reply = rs.Key(prefix + "replies")
				}
			}
			s.cfg.Cap, s.cfg.Idle = c.cap, c.idle
			r := &crashRun{c: c, dir: filepath.Join(env.dir, fmt.Sprintf("%s-%d", c.name, i)), point: point, s: s}
			runs[c.name] = append(runs[c.name], r)
			all = append(all, r)
		}
	}

	start := time.Now()
	sem := make(chan struct{}, crashParallel)
	var wg sync.WaitGroup
	for _, r := range all {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			began := time.Now()
			r.err = r.run(env)
			r.took = time.Since(began)
		})
	}
	wg.Wait()
	t.Logf("%d runs (%d crash points) in %s", len(all), len(all)-len(runs), time.Since(start).Round(time.Millisecond))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := skip[c.name]; ok {
				t.Skip(why)
			}
			rec, crashes := runs[c.name][0], runs[c.name][1:]
			t.Run("recording", func(t *testing.T) {
				if rec.err != nil {
					t.Fatalf("the life without a crash: %v", rec.err)
				}
				got, want := slices.Sorted(slices.Values(rec.points)), slices.Sorted(slices.Values(c.points))
				if !slices.Equal(got, want) {
					t.Fatalf("the life's settlement calls are\n  %s\nwant\n  %s\n(in the order reached: %s)", strings.Join(got, ", "), strings.Join(want, ", "), strings.Join(rec.points, ", "))
				}
				t.Logf("%d points in %s: %s", len(rec.points), rec.took.Round(time.Millisecond), rec.summary)
			})
			for _, r := range crashes {
				t.Run(r.point, func(t *testing.T) {
					if r.err != nil {
						t.Fatalf("killed at %q: %v", r.point, r.err)
					}
					t.Logf("%s: %s", r.took.Round(time.Millisecond), r.summary)
				})
			}
		})
	}
}

// preloadScripts loads internal/script's Lua scripts, so that no settlement call meets
// NOSCRIPT (whose fallback EVAL would be a second call).
func preloadScripts(rdb *redis.Client) error {
	for _, src := range script.Sources() {
		if err := rdb.ScriptLoad(context.Background(), src).Err(); err != nil {
			return err
		}
	}
	return nil
}

// crashEnv is what the runs share: the servers, the processes started.
type crashEnv struct {
	db  *sql.DB       // PostgreSQL, for setting up and looking at inbox tables
	dir string        // the test's temporary directory
	rdb *redis.Client // the real Redis

	mu    sync.Mutex
	procs []*proc
}

// start starts a worker process with cfg.
func (e *crashEnv) start(dir string, cfg workerConfig) (*proc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	p := &proc{done: make(chan struct{}), log: filepath.Join(dir, cfg.Consumer+".log")}
	out, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestSoakWorker$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), envWorker+"="+string(raw))
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		_ = out.Close()
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	go func() {
		p.err = p.cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	return p, nil
}

// killAll kills, by pid, every worker still running.
func (e *crashEnv) killAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// crashRun is one run of a case: its recording run (point "") or a crash at point.
type crashRun struct {
	c     crashCase
	dir   string
	point string
	s     subject

	err     error
	points  []string // the points the recording run reached, in order
	summary string
	took    time.Duration
}

// crashDeadline bounds each wait of a run: for a worker to reach its crash point, for
// the drain, for a graceful stop.
const crashDeadline = time.Minute

// run plays the run: the setup, the crashing worker (unless recording), the worker that
// drains, the judgement.
func (r *crashRun) run(e *crashEnv) error {
	ctx := context.Background()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	cfg := r.s.cfg
	cfg.Ledger = filepath.Join(r.dir, "ledger")
	w, err := ledger.Open(cfg.Ledger)
	if err != nil {
		return err
	}
	defer w.Close()
	for _, id := range []string{crashLife, crashAcked} {
		if err := w.Publish(id); err != nil {
			return err
		}
	}
	if err := e.setup(ctx, r.c.transport, r.s); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	consumers := []string{crashGhost}

	var crashNote string
	if r.point != "" {
		cc := cfg
		cc.Consumer = "crash"
		cc.Crash = &crashSpec{Point: r.point, Record: filepath.Join(r.dir, "crash.points")}
		consumers = append(consumers, cc.Consumer)
		p, err := e.start(r.dir, cc)
		if err != nil {
			return err
		}
		if err := r.awaitCrash(ctx, p, consumers); err != nil {
			return err
		}
		if err := w.Kill(p.cmd.Process.Pid); err != nil {
			return err
		}
		reached, err := readPoints(cc.Crash.Record)
		if err != nil {
			return err
		}
		if len(reached) == 0 || reached[len(reached)-1] != r.point {
			return fmt.Errorf("the worker died, but its last point was not %q: it reached %v", r.point, reached)
		}
		crashNote = fmt.Sprintf("killed after %d points; ", len(reached))
	}

	dc := cfg
	dc.Consumer = "drain"
	dc.Crash = &crashSpec{Record: filepath.Join(r.dir, "drain.points")}
	consumers = append(consumers, dc.Consumer)
	p, err := e.start(r.dir, dc)
	if err != nil {
		return err
	}
	if err := r.awaitDrain(ctx, p, consumers, dc.Crash.Record); err != nil {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(crashDeadline):
		return fmt.Errorf("the draining worker did not stop within %s of SIGTERM\n%s", crashDeadline, p.tail())
	}
	if p.err != nil {
		return fmt.Errorf("the draining worker failed: %v\n%s", p.err, p.tail())
	}
	drainPoints, err := readPoints(dc.Crash.Record)
	if err != nil {
		return err
	}
	if r.point == "" {
		r.points = drainPoints
	}

	// The oracle: the ledger, with the dead letters found.
	dead, err := r.s.dead(ctx)
	if err != nil {
		return err
	}
	evs, err := ledger.Read(cfg.Ledger)
	if err != nil {
		return err
	}
	rep := ledger.Check(ledger.Input{Events: evs, Dead: dead, MaxAttempts: r.c.cap})
	if !rep.OK() {
		return fmt.Errorf("the ledger does not hold: %s\n%s", rep, firstProblems(rep, 20))
	}
	if st := rep.Final[crashLife]; st != ledger.StateDeadLettered {
		return fmt.Errorf("message %s ended %q, want %q (its handler never acks): %s", crashLife, st, ledger.StateDeadLettered, rep)
	}
	if st := rep.Final[crashAcked]; st != ledger.StateAcked && st != ledger.StateAckedUnconfirmed {
		return fmt.Errorf("message %s ended %q, want acked: %s", crashAcked, st, rep)
	}
	want := 0
	if r.point != "" {
		want = 1
	}
	if rep.Kills != want {
		return fmt.Errorf("the ledger counts %d kills, want %d", rep.Kills, want)
	}
	// And a direct look at where the messages are.
	if err := e.inspect(ctx, r.c, r.s); err != nil {
		return err
	}
	if r.c.reply {
		if err := e.checkReplies(ctx, r.c, r.s); err != nil {
			return err
		}
	}
	r.summary = crashNote + rep.String()
	return nil
}

// awaitCrash waits for the crashing worker to kill itself (SIGKILL). It fails at the
// deadline, or when the transport stays drained for 5s with the worker still running:
// the life ended without reaching the point.
func (r *crashRun) awaitCrash(ctx context.Context, p *proc, consumers []string) error {
	deadline := time.Now().Add(crashDeadline)
	var drainedSince time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if p.exited() {
			var ee *exec.ExitError
			if errors.As(p.err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
					return nil
				}
			}
			return fmt.Errorf("the worker to crash at %q exited otherwise: %v\n%s", r.point, p.err, p.tail())
		}
		drained, err := r.s.drained(ctx, consumers)
		if err != nil {
			return err
		}
		switch {
		case !drained:
			drainedSince = time.Time{}
		case drainedSince.IsZero():
			drainedSince = time.Now()
		case time.Since(drainedSince) > 5*time.Second:
			return fmt.Errorf("the life ended without reaching %q (the transport is drained and the worker runs on)\n%s", r.point, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the worker did not reach %q within %s\n%s", r.point, crashDeadline, p.tail())
		}
	}
	return nil
}

// awaitDrain waits until the worker is up (it has recorded crashReady: a SIGTERM is a
// graceful stop from then on) and the transport is drained.
func (r *crashRun) awaitDrain(ctx context.Context, p *proc, consumers []string, record string) error {
	deadline := time.Now().Add(crashDeadline)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	up := false
	for range tick.C {
		if p.exited() {
			return fmt.Errorf("the draining worker exited: %v\n%s", p.err, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not drained within %s (worker up: %t)\n%s", crashDeadline, up, p.tail())
		}
		if !up {
			b, err := os.ReadFile(record)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			if up = slices.Contains(strings.Split(string(b), "\n"), crashReady); !up {
				continue
			}
		}
		drained, err := r.s.drained(ctx, consumers)
		if err != nil {
			return err
		}
		if drained {
			return nil
		}
	}
	return nil
}

// readPoints reads a worker's record of points (without its crashReady line); a note in
// it (a NOSCRIPT) is an error.
func readPoints(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		switch {
		case strings.HasPrefix(sc.Text(), "note "):
			return nil, fmt.Errorf("%s: %s", path, sc.Text())
		case sc.Text() != crashReady:
			out = append(out, sc.Text())
		}
	}
	return out, sc.Err()
}

// setup makes the dead consumer's leftover of message crashLife and publishes message
// crashAcked: a stream entry pending at the ghost consumer, an item in the ghost's
// processing list (registered, no heartbeat), or a row whose lease passed.
func (e *crashEnv) setup(ctx context.Context, transport string, s subject) error {
	life := []byte(crashLife)
	switch transport {
	case transportStream, transportZset, transportClaiming:
		if err := e.rdb.XGroupCreateMkStream(ctx, s.cfg.Key, "g", "0").Err(); err != nil {
			return err
		}
		if err := s.publish(ctx, crashLife, life); err != nil {
			return err
		}
		res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: crashGhost, Streams: []string{s.cfg.Key, ">"}, Count: 1, Block: -1}).Result()
		if err != nil {
			return err
		}
		if len(res) != 1 || len(res[0].Messages) != 1 {
			return fmt.Errorf("the ghost read %v, want message %s", res, crashLife)
		}
	case transportReliable:
		pub := settle.NewPublisher(e.rdb)
		if err := pub.PublishListBytes(ctx, settle.ProcessingList(s.cfg.Key, crashGhost), life, settle.Headers(map[string]string{headerID: crashLife})); err != nil {
			return err
		}
		if err := e.rdb.SAdd(ctx, keys.ListConsumers(s.cfg.Key), crashGhost).Err(); err != nil {
			return err
		}
	case transportInbox:
		if err := s.publish(ctx, crashLife, life); err != nil {
			return err
		}
		res, err := e.db.ExecContext(ctx, `UPDATE `+s.cfg.Key+` SET locked_until = now() - interval '1 second' WHERE payload = $1`, life)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("lease of the ghost's row: %d rows, %v", n, err)
		}
	}
	return s.publish(ctx, crashAcked, []byte(crashAcked))
}

// inspect looks at the transport directly: message crashLife in exactly one dead letter
// (at the cap), message crashAcked in none, and nothing pending, unread, delayed, in a
// list or processing list, or left in the table.
func (e *crashEnv) inspect(ctx context.Context, c crashCase, s subject) error {
	switch c.transport {
	case transportStream, transportZset, transportClaiming:
		pending, err := e.rdb.XPending(ctx, s.cfg.Key, "g").Result()
		if err != nil {
			return err
		}
		if pending.Count != 0 {
			return fmt.Errorf("%d entries still pending: %v", pending.Count, pending.Consumers)
		}
		info, err := e.rdb.XInfoStream(ctx, s.cfg.Key).Result()
		if err != nil {
			return err
		}
		groups, err := e.rdb.XInfoGroups(ctx, s.cfg.Key).Result()
		if err != nil {
			return err
		}
		if len(groups) != 1 || groups[0].LastDeliveredID != info.LastGeneratedID {
			return fmt.Errorf("entries left unread in the stream: groups %+v, last entry %s", groups, info.LastGeneratedID)
		}
		if n, err := e.rdb.ZCard(ctx, s.cfg.Delays).Result(); err != nil || n != 0 {
			return fmt.Errorf("%d members left in the delay set (%v)", n, err)
		}
		msgs, err := e.rdb.XRange(ctx, s.cfg.DeadLetter, "-", "+").Result()
		if err != nil {
			return err
		}
		var ids []string
		for _, m := range msgs {
			_, _, headers := wire.FromStream(m.Values)
			ids = append(ids, headers[headerID]+"@"+headers[settle.HeaderRetryCount])
		}
		return oneDeadLetter(ids, c.cap)
	case transportReliable:
		if n, err := e.rdb.LLen(ctx, s.cfg.Key).Result(); err != nil || n != 0 {
			return fmt.Errorf("%d items left in the list (%v)", n, err)
		}
		it := e.rdb.Scan(ctx, 0, settle.ProcessingList(s.cfg.Key, "*"), 1000).Iterator()
		for it.Next(ctx) {
			if n, err := e.rdb.LLen(ctx, it.Val()).Result(); err != nil || n != 0 {
				return fmt.Errorf("%d items left in processing list %s (%v)", n, it.Val(), err)
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		vals, err := e.rdb.LRange(ctx, s.cfg.DeadLetter, 0, -1).Result()
		if err != nil {
			return err
		}
		var ids []string
		for _, v := range vals {
			_, headers, _, err := wire.FromEnvelope([]byte(v))
			if err != nil {
				return fmt.Errorf("dead letter %q: %w", v, err)
			}
			ids = append(ids, headers[headerID]+"@"+headers[settle.HeaderRetryCount])
		}
		return oneDeadLetter(ids, c.cap)
	case transportInbox:
		rows, err := e.db.QueryContext(ctx, `SELECT grp, payload, attempt FROM `+s.cfg.Key+` ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		var left, ids []string
		for rows.Next() {
			var grp string
			var payload []byte
			var attempt int
			if err := rows.Scan(&grp, &payload, &attempt); err != nil {
				return err
			}
			switch grp {
			case s.cfg.DeadLetter:
				ids = append(ids, fmt.Sprintf("%s@%d", payload, attempt))
			case s.cfg.Reply: // counted by checkReplies
			default:
				left = append(left, fmt.Sprintf("%s in %s", payload, grp))
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("rows left in the table: %v", left)
		}
		return oneDeadLetter(ids, c.cap)
	}
	return fmt.Errorf("unknown transport %q", c.transport)
}

// oneDeadLetter checks the dead letters found (id@attempts): exactly one, of message
// crashLife at the cap.
func oneDeadLetter(ids []string, cap int) error {
	if want := fmt.Sprintf("%s@%d", crashLife, cap); len(ids) != 1 || ids[0] != want {
		return fmt.Errorf("dead letters %v, want exactly [%s]", ids, want)
	}
	return nil
}

// checkReplies checks that the reply key of a reply case holds exactly one reply, to
// message crashAcked: a reply is written with its original's completion, so a crash at
// any point leaves either both (the drain finds nothing to do) or neither (the drain
// replies once).
func (e *crashEnv) checkReplies(ctx context.Context, c crashCase, s subject) error {
	var n int64
	var err error
	switch c.transport {
	case transportInbox:
		err = e.db.QueryRowContext(ctx, `SELECT count(*) FROM `+s.cfg.Key+` WHERE grp = $1`, s.cfg.Reply).Scan(&n)
	case transportReliable:
		n, err = e.rdb.LLen(ctx, s.cfg.Reply).Result()
	default:
		n, err = e.rdb.XLen(ctx, s.cfg.Reply).Result()
	}
	if err != nil {
		return fmt.Errorf("replies in %s: %w", s.cfg.Reply, err)
	}
	if n != 1 {
		return fmt.Errorf("%s holds %d replies, want exactly 1 (message %s answered once, atomically with its completion)", s.cfg.Reply, n, crashAcked)
	}
	return nil
}
