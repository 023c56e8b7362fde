package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/ledger"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

// The partitioned soak's sizes: 4 members on 16 partitions, 100,000 messages over 1,000
// keys, one member killed with SIGKILL and a new one started once half are published.
const (
	partMembers    = 4
	partPartitions = 16
	partMessages   = 100_000
	partKeys       = 1_000
	// partLeaseTTL is the members' LeaseTTL: short, so that the killed member's
	// partitions move within seconds; long enough that a member on a loaded machine
	// renews within it.
	partLeaseTTL = 2 * time.Second
	// partSlack is what the machine's load may add to a move's bound (LeaseTTL and a
	// third of it for the others to notice).
	partSlack = time.Second
)

// TestSoakPartitionedStreamOrderedSurvivesKill9: a PartitionedStream of 16 partitions
// read with Ordered by 4 member processes, 100,000 messages published over 1,000 keys
// (each key's messages numbered in publish order), one member (the one with the most
// entries pending) killed with SIGKILL once half are published and a new member
// started. The ledger holds: every message settled exactly once, the only handler runs
// again being deliveries in flight in the killed process; every key's messages run in
// publish order, none started before the one before it of its key had settled; the
// lease history (every lease call, from each member's Redis client) shows each
// partition held by one member at a time, each taking under a greater fencing token,
// and every run of a partition's message in a process holding its lease; the killed
// member's partitions are taken by the others within LeaseTTL and a third of it (plus
// slack for the machine); and at the graceful stop every partition is handed back.
// Cluster: on SETTLE_REDIS_CLUSTER, the partitions over every master; Redis: on
// SETTLE_REDIS_URL, the partitions in one node.
func TestSoakPartitionedStreamOrderedSurvivesKill9(t *testing.T) {
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.Cluster(t)
		name := spreadName(t, c.Client)
		t.Cleanup(func() { deletePartitioned(c.Client, name) })
		partitionedSoak(t, c.Client, workerConfig{Cluster: os.Getenv(redistest.EnvCluster), Key: name})
	})
	t.Run("Redis", func(t *testing.T) {
		redistest.RealOnly(t)
		r := redistest.New(t)
		name := r.Untagged(t, "orders")
		partitionedSoak(t, r.Client, workerConfig{RedisURL: os.Getenv(redistest.EnvURL), Key: name})
	})
}

// spreadName returns a partitioned stream name of the test's own whose 16 partitions
// land on every master of the cluster.
func spreadName(t *testing.T, c *redis.ClusterClient) string {
	t.Helper()
	ctx := context.Background()
	var masters atomic.Int32
	if err := c.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := "t" + hex.EncodeToString(b[:]) + "-orders"
		on := map[string]bool{}
		for i := range partPartitions {
			m, err := c.MasterForKey(ctx, keys.Partition(name, i))
			if err != nil {
				t.Fatal(err)
			}
			on[m.Options().Addr] = true
		}
		if len(on) == int(masters.Load()) {
			t.Logf("partitioned stream %s: %d partitions over %d masters", name, partPartitions, len(on))
			return name
		}
	}
	t.Fatalf("no name found whose %d partitions cover the %d masters", partPartitions, masters.Load())
	return ""
}

// deletePartitioned deletes a partitioned stream's keys, one by one (they are in
// several slots).
func deletePartitioned(c redis.UniversalClient, name string) {
	ctx := context.Background()
	del := []string{name, keys.PartitionMembers(name, "g")}
	for i := range partPartitions {
		del = append(del, keys.Partition(name, i), keys.PartitionLease(name, i, "g"), keys.InPartition(name, i, "dlq"))
	}
	for _, k := range del {
		c.Del(ctx, k)
	}
}

// partitionedSoak is the soak on the server rdb talks to, the workers connecting as
// base says (RedisURL or Cluster) to the partitioned stream base.Key.
func partitionedSoak(t *testing.T, rdb redis.UniversalClient, base workerConfig) {
	seed := soakSeed(t)
	ctx := context.Background()
	base.Cap = 5
	base.DeadLetter = "dlq"
	base.LeaseTTL = partLeaseTTL
	base.Partitions = partPartitions
	base.Transport = transportPartitioned
	src := settle.PartitionedStream(rdb, base.Key, "g", settle.Partitions(partPartitions))
	if err := src.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, base, seed)
	h.base.LeaseLog = h.ledger + ".leases"
	t.Cleanup(func() {
		// A failure keeps the ledger, the lease history and the workers' logs.
		if !t.Failed() {
			return
		}
		keep, err := os.MkdirTemp("", "settle-partitioned-soak-")
		if err == nil {
			err = os.CopyFS(keep, os.DirFS(h.dir))
		}
		t.Logf("the ledger, lease history and worker logs kept in %s (%v)", keep, err)
	})
	start := time.Now()
	for slot := range partMembers {
		h.start(slot)
	}

	// Each publisher goroutine publishes the messages of its keys in their order; the
	// messages of a key are thus published, and land in its partition, in order.
	const publishers = 4
	pub := settle.NewPublisher(rdb)
	var published atomic.Int64
	errs := make(chan error, publishers)
	for g := range publishers {
		go func() {
			errs <- func() error {
				for n := range partMessages / partKeys {
					for k := g; k < partKeys; k += publishers {
						id := partMessageID(k, n)
						if err := h.w.Publish(id); err != nil {
							return err
						}
						if _, err := pub.PublishBytes(ctx, base.Key, []byte(id), settle.Key(partKey(k)), settle.Headers(map[string]string{headerID: id})); err != nil {
							return err
						}
						published.Add(1)
					}
				}
				return nil
			}()
		}()
	}
	pubDone := 0
	// The kill: once half the messages are published, of the member with the most
	// entries pending (read, not settled: running, waiting behind their key's head, or
	// being acked), at least 4 (1 once every message is published), so that the crash
	// finds deliveries in flight.
	pl := plan{deadline: 10 * time.Minute, maxKills: 1, killWhen: func() (int, bool) {
		n := published.Load()
		if n < partMessages/2 {
			return 0, false
		}
		slot, most := pendingMost(ctx, rdb, base.Key)
		return slot, most >= 4 || n == partMessages && most >= 1
	}}
	h.supervise(pl, func(ctx context.Context) (bool, error) {
		for pubDone < publishers {
			select {
			case err := <-errs:
				if err != nil {
					return false, fmt.Errorf("publish: %w", err)
				}
				pubDone++
			default:
				return false, nil
			}
		}
		return partitionsDrained(ctx, rdb, base.Key)
	})
	drainedAfter := time.Since(start)
	h.stopAll()
	checking := time.Now()
	defer func() { t.Logf("checked in %s", time.Since(checking).Round(time.Millisecond)) }()

	evs, err := ledger.Read(h.ledger)
	if err != nil {
		t.Fatal(err)
	}
	rep := ledger.Check(ledger.Input{Events: evs, MaxAttempts: base.Cap})
	t.Logf("%d messages over %d keys on %d partitions, drained in %s: %s", partMessages, partKeys, partPartitions, drainedAfter.Round(time.Millisecond), rep)
	if !rep.OK() {
		t.Fatalf("the ledger does not hold (seed %d):\n%s", seed, firstProblems(rep, 30))
	}
	if rep.Published != partMessages {
		t.Fatalf("got %d messages in the ledger, want %d", rep.Published, partMessages)
	}
	if rep.Kills != 1 {
		t.Fatalf("%d workers killed, want 1", rep.Kills)
	}
	if n := rep.States[ledger.StateAcked] + rep.States[ledger.StateAckedUnconfirmed]; n != partMessages {
		t.Fatalf("%d messages acked, want every one of %d: %s", n, partMessages, rep)
	}
	inFlight := checkKeyOrder(t, evs, rep.Final)
	if rep.Duplicates != rep.ByCrash {
		t.Fatalf("%d handler runs again, %d of them deliveries in flight in the killed process: the others are explained by expiries (%d) or failed settlements (%d), which this run has no cause for",
			rep.Duplicates, rep.ByCrash, rep.ByExpiry, rep.ByFailedSettlement)
	}
	ops, err := readLeaseOps(h.base.LeaseLog)
	if err != nil {
		t.Fatal(err)
	}
	ls := checkLeases(t, ops, evs)
	t.Logf("in order per key: every message started after its key's previous one settled; in flight in the killed process: %d, run again after the kill: %d",
		inFlight, rep.ByCrash)
	t.Logf("leases: %d lease calls, %d takings (each under a greater token, one holder at a time), %d hand-backs; the killed member held %d partitions, taken by others after at most %s (LeaseTTL %s)",
		len(ops), ls.takes, ls.drops, ls.moved, ls.longestMove.Round(time.Millisecond), partLeaseTTL)
}

func partKey(k int) string { return fmt.Sprintf("k%04d", k) }

// partMessageID is the id of key k's message n (its n-th, from 0).
func partMessageID(k, n int) string { return fmt.Sprintf("%s.%05d", partKey(k), n) }

// parsePartMessageID returns the key and number of a message id.
func parsePartMessageID(id string) (string, int, bool) {
	key, num, ok := strings.Cut(id, ".")
	n, err := strconv.Atoi(num)
	return key, n, ok && err == nil
}

// pendingMost returns the slot of the worker with the most entries pending in group g
// over the partitions of name, and how many (0 when none, or on an error: asked again).
func pendingMost(ctx context.Context, rdb redis.UniversalClient, name string) (int, int64) {
	by := map[string]int64{}
	for i := range partPartitions {
		sum, err := rdb.XPending(ctx, keys.Partition(name, i), "g").Result()
		if err != nil {
			continue // no stream or group yet
		}
		for c, n := range sum.Consumers {
			by[c] += n
		}
	}
	slot, most := 0, int64(0)
	for c, n := range by {
		var s, gen int
		if _, err := fmt.Sscanf(c, "w%d-%d", &s, &gen); err == nil && n > most {
			slot, most = s, n
		}
	}
	return slot, most
}

// partitionsDrained reports whether every partition of name has nothing pending in
// group g and nothing unread by it.
func partitionsDrained(ctx context.Context, rdb redis.UniversalClient, name string) (bool, error) {
	for i := range partPartitions {
		key := keys.Partition(name, i)
		var info *redis.XInfoStreamCmd
		var groups *redis.XInfoGroupsCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			info = p.XInfoStream(ctx, key)
			groups = p.XInfoGroups(ctx, key)
			return nil
		})
		if err != nil && !strings.Contains(err.Error(), "no such key") {
			return false, err
		}
		if info.Err() != nil {
			continue // no message went to this partition yet
		}
		drained := false
		for _, g := range groups.Val() {
			if g.Name == "g" {
				drained = g.Pending == 0 && g.LastDeliveredID == info.Val().LastGeneratedID
			}
		}
		if !drained {
			return false, nil
		}
	}
	return true, nil
}

// orderedHandler is the partitioned soak's handler: up to 1 ms of work, then an ack;
// 1% of messages ask RetryAfter(20 ms) at their first attempt (retried in place, their
// key held meanwhile).
func orderedHandler(seed int64) settle.Handler {
	return settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		id := messageID(m)
		time.Sleep(time.Duration(unit(seed, id, 1000) * float64(time.Millisecond))) // the handler's own work
		if m.Attempt == 1 && unit(seed, id, 0) < 0.01 {
			return settle.RetryAfter(20*time.Millisecond, errors.New("soak: retry in place"))
		}
		return nil
	})
}

// partitionedSource returns a worker's PartitionedStream, on the cluster cfg.Cluster
// names or else on rdb, every lease call of its client appended to cfg.LeaseLog.
func partitionedSource(t *testing.T, cfg workerConfig, rdb *redis.Client) settle.Source {
	var c redis.UniversalClient = rdb
	if cfg.Cluster != "" {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cfg.Cluster, ",")})
		t.Cleanup(func() { _ = cc.Close() })
		c = cc
	}
	f, err := os.OpenFile(cfg.LeaseLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	c.AddHook(leaseRecorder{f: f, pid: os.Getpid()})
	return settle.PartitionedStream(c, cfg.Key, "g", settle.Partitions(cfg.Partitions), settle.LeaseTTL(cfg.LeaseTTL),
		settle.Consumer(cfg.Consumer), settle.Block(200*time.Millisecond))
}

// leaseOp is one call of the lease script (lease.lua) and its answer, as a member's
// client saw it.
type leaseOp struct {
	PID       int    `json:"p"`
	Partition int    `json:"i"`
	Member    string `json:"m"`
	Held      string `json:"h,omitempty"` // the token the member said it held
	Mode      string `json:"op"`          // "take" (take or renew) or "drop"
	State     int    `json:"st"`          // a script.LeaseState
	Result    string `json:"r"`           // the token now held, or the other owner
	// Before and After bound when the script ran, in Unix microseconds (the machine's
	// clock, which the Redis servers on it read too).
	Before int64 `json:"b"`
	After  int64 `json:"a"`
}

// leaseRecorder is a go-redis hook appending every lease call that got an answer to a
// file, one line each, with one write(2) (see package ledger).
type leaseRecorder struct {
	f   *os.File
	pid int
}

func (leaseRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r leaseRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		before := time.Now().UnixMicro()
		err := next(ctx, cmd)
		after := time.Now().UnixMicro()
		args := cmd.Args()
		if err != nil || len(args) != 9 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			return err
		}
		key, _ := args[3].(string)
		tag, rest, ok := strings.Cut(key, ":lease:")
		if !ok || !strings.HasSuffix(tag, "}") {
			return err
		}
		i, ok := keys.PartitionIndex(tag)
		if !ok || rest != "g" {
			return err
		}
		res, _ := cmd.(*redis.Cmd).Slice()
		if len(res) != 2 {
			return err
		}
		op := leaseOp{PID: r.pid, Partition: i, Member: fmt.Sprint(args[4]), Held: fmt.Sprint(args[5]), Mode: fmt.Sprint(args[8]), Before: before, After: after}
		st, _ := res[0].(int64)
		op.State = int(st)
		op.Result, _ = res[1].(string)
		b, jerr := json.Marshal(op)
		if jerr == nil {
			_, jerr = r.f.Write(append(b, '\n'))
		}
		if jerr != nil {
			panic(jerr)
		}
		return err
	}
}

func (leaseRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func readLeaseOps(path string) ([]leaseOp, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ops []leaseOp
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var op leaseOp
		if err := json.Unmarshal([]byte(line), &op); err != nil {
			return nil, fmt.Errorf("lease log: %q: %w", line, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// checkKeyOrder checks that no run of a key's message started before the key's
// previous message had settled for good (its final settlement recorded; for one acked in
// a process killed before it recorded the settlement, the kill), and returns how many
// runs were in flight in killed processes (run, no settlement).
func checkKeyOrder(t *testing.T, evs []ledger.Event, final map[string]ledger.State) int {
	t.Helper()
	settledAt := map[string]int{} // message -> ledger line of its final settlement
	lastRun := map[string]ledger.Event{}
	open := map[string]ledger.Event{} // pid and delivery -> its run without a settlement yet
	killedAt := map[int]int{}
	inFlight := 0
	for _, e := range evs {
		k := strconv.Itoa(e.PID) + " " + e.Delivery
		switch e.Kind {
		case ledger.KindRun:
			lastRun[e.ID] = e
			open[k] = e
		case ledger.KindSettle:
			delete(open, k)
			if _, ok := settledAt[e.ID]; !ok && e.Err == "" && (e.Action == "ack" || e.Action == "drop" || e.Action == "dead_letter") {
				settledAt[e.ID] = e.Seq
			}
		case ledger.KindKill:
			killedAt[e.PID] = e.Seq
			for k, r := range open {
				if r.PID == e.PID {
					inFlight++
					delete(open, k)
				}
			}
		}
	}
	for id, st := range final {
		if _, ok := settledAt[id]; !ok && st == ledger.StateAckedUnconfirmed {
			settledAt[id] = killedAt[lastRun[id].PID]
		}
	}
	var bad []string
	for _, e := range evs {
		if e.Kind != ledger.KindRun {
			continue
		}
		key, n, ok := parsePartMessageID(e.ID)
		if !ok {
			t.Fatalf("run of a message of no key: %+v", e)
		}
		if n == 0 {
			continue
		}
		prev := fmt.Sprintf("%s.%05d", key, n-1)
		if at, ok := settledAt[prev]; !ok || at > e.Seq {
			bad = append(bad, fmt.Sprintf("%s (attempt %d, pid %d) started at ledger line %d before %s, its key's previous message, settled (line %d)", e.ID, e.Attempt, e.PID, e.Seq, prev, at))
		}
	}
	if len(bad) > 0 {
		n := len(bad)
		t.Fatalf("%d runs out of their key's order:\n%s", n, strings.Join(bad[:min(n, 20)], "\n"))
	}
	return inFlight
}

// leaseSummary is what checkLeases saw.
type leaseSummary struct {
	takes, drops int
	moved        int           // partitions the killed member held, taken by others
	longestMove  time.Duration // the longest from the kill to such a taking
}

// holding is one member's hold on a partition under one token.
type holding struct {
	pid       int
	member    string
	token     int
	take      leaseOp
	last      leaseOp // the last call that found it held (the take or a renewal)
	drop      *leaseOp
	partition int
}

// end bounds when the holding ended on the server's clock (µs): from below (it lasted
// at least until then), and from above.
func (h *holding) end() (lo, hi int64) {
	if h.drop != nil {
		return h.drop.Before, h.drop.After
	}
	return h.last.Before + partLeaseTTL.Microseconds(), h.last.After + partLeaseTTL.Microseconds()
}

// checkLeases judges the lease history: per partition, every taking under a token
// greater than any before it (no token twice); no taking before the previous holding
// ended (handed back, or its TTL run out from its last renewal); every run of a
// partition's message started in a process while it held the partition's lease; every
// partition handed back at the end (the graceful stop); and the killed member's
// partitions taken by another within LeaseTTL and a third of it, plus partSlack.
func checkLeases(t *testing.T, ops []leaseOp, evs []ledger.Event) leaseSummary {
	t.Helper()
	var sum leaseSummary
	byPart := map[int][]*holding{}
	cur := map[string]*holding{} // partition and member+token -> its holding
	hk := func(i int, member, token string) string { return fmt.Sprint(i, " ", member, " ", token) }
	sort.SliceStable(ops, func(a, b int) bool { return ops[a].Before < ops[b].Before })
	for _, op := range ops {
		switch {
		case op.Mode == "take" && op.State == int(script.LeaseTaken):
			tok, err := strconv.Atoi(op.Result)
			if err != nil {
				t.Fatalf("lease call answered token %q: %+v", op.Result, op)
			}
			h := &holding{pid: op.PID, member: op.Member, token: tok, take: op, last: op, partition: op.Partition}
			byPart[op.Partition] = append(byPart[op.Partition], h)
			cur[hk(op.Partition, op.Member, op.Result)] = h
			sum.takes++
		case op.State == int(script.LeaseHeld):
			h := cur[hk(op.Partition, op.Member, op.Held)]
			if h == nil {
				t.Fatalf("partition %d: %s renewed or handed back token %s, which it never took: %+v", op.Partition, op.Member, op.Held, op)
			}
			if op.Mode == "drop" {
				d := op
				h.drop = &d
				sum.drops++
			} else {
				h.last = op
			}
		}
	}
	for i, hs := range byPart {
		sort.Slice(hs, func(a, b int) bool { return hs[a].token < hs[b].token })
		for k := 1; k < len(hs); k++ {
			prev, next := hs[k-1], hs[k]
			if next.token == prev.token {
				t.Fatalf("partition %d: token %d taken twice (%s and %s)", i, next.token, prev.member, next.member)
			}
			if next.take.After < prev.take.Before {
				t.Fatalf("partition %d: token %d (%s) taken before token %d (%s)", i, next.token, next.member, prev.token, prev.member)
			}
			// Proven two holders: the next taking ran before the previous holding
			// could have ended (2 ms for the scripts' clock, read in whole ms).
			if lo, _ := prev.end(); next.take.After+2000 < lo {
				t.Fatalf("partition %d: %s took token %d at %s while %s held token %d until at least %s: two holders at once",
					i, next.member, next.token, usTime(next.take.After), prev.member, prev.token, usTime(lo))
			}
		}
		if last := hs[len(hs)-1]; last.drop == nil {
			t.Fatalf("partition %d: its last holder %s (token %d) did not hand it back at the graceful stop", i, last.member, last.token)
		}
	}
	// Every run of a partition's message began while its process held that partition.
	byPID := map[int][]*holding{}
	for _, hs := range byPart {
		for _, h := range hs {
			byPID[h.pid] = append(byPID[h.pid], h)
		}
	}
	for _, e := range evs {
		if e.Kind != ledger.KindRun {
			continue
		}
		key, _, _ := strings.Cut(e.Delivery, " ")
		i, ok := keys.PartitionIndex(key)
		if !ok {
			t.Fatalf("run of a delivery of no partition: %+v", e)
		}
		at := e.Time * 1000 // ms, floored
		held := false
		for _, h := range byPID[e.PID] {
			if _, hi := h.end(); h.partition == i && h.take.Before <= at+1000 && at <= hi {
				held = true
				break
			}
		}
		if !held {
			t.Fatalf("%s ran (pid %d, ledger line %d, at %s) from partition %d, whose lease its process did not hold then; its holdings:\n%s",
				e.ID, e.PID, e.Seq, usTime(at), i, holdings(byPart[i]))
		}
	}
	// The killed member's partitions moved within the bound.
	bound := partLeaseTTL + partLeaseTTL/3 + partSlack
	for _, e := range evs {
		if e.Kind != ledger.KindKill {
			continue
		}
		kill := e.Time * 1000
		for i, hs := range byPart {
			for k, h := range hs {
				if h.pid != e.PID || h.take.Before > kill || h.drop != nil && h.drop.After <= kill ||
					k+1 < len(hs) && hs[k+1].take.After <= kill {
					continue // not held at the kill
				}
				if k == len(hs)-1 {
					t.Fatalf("partition %d: held by the killed member %s, never taken by another", i, h.member)
				}
				d := time.Duration(hs[k+1].take.After-kill) * time.Microsecond
				if d > bound {
					t.Fatalf("partition %d: held by the killed member %s, taken by %s %s after the kill, want within %s (LeaseTTL, a third of it, and %s for the machine)",
						i, h.member, hs[k+1].member, d.Round(time.Millisecond), bound, partSlack)
				}
				sum.moved++
				sum.longestMove = max(sum.longestMove, d)
			}
		}
		if sum.moved == 0 {
			t.Fatalf("the killed process %d held no partition: the soak proved nothing about a member's crash", e.PID)
		}
	}
	return sum
}

// holdings describes a partition's holdings, one a line.
func holdings(hs []*holding) string {
	var b strings.Builder
	for _, h := range hs {
		lo, hi := h.end()
		how := "ran out"
		if h.drop != nil {
			how = "handed back"
		}
		fmt.Fprintf(&b, "token %d: %s (pid %d) from %s to %s–%s (%s)\n", h.token, h.member, h.pid, usTime(h.take.Before), usTime(lo), usTime(hi), how)
	}
	return b.String()
}

func usTime(us int64) string { return time.UnixMicro(us).UTC().Format("15:04:05.000000") }
