package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// sample is what one run of one system on one scenario measured.
type sample struct {
	elapsed time.Duration
	msgs    int              // messages the scenario counts (originals, not deliveries)
	cmds    map[string]int64 // Redis command calls during the run, by command
	srvCPU  time.Duration    // redis-server user+system CPU; srvOK false when unknown
	srvOK   bool
	cliCPU  time.Duration // this process's user+system CPU
	mallocs uint64        // heap allocations in this process
	late    []time.Duration
	back    []time.Duration // stream rows: how long after due each retry copy was written (its id's ms)
	capped  bool            // ended at the run's cap (SQL rows): msgs is what was done by then
	note    string          // something the run saw that the figures do not show
}

// rate is the run's messages per second.
func (s *sample) rate() float64 { return float64(s.msgs) / s.elapsed.Seconds() }

// perMsg is x per message of the run (0 when none was done).
func (s *sample) perMsg(x float64) float64 {
	if s.msgs == 0 {
		return 0
	}
	return x / float64(s.msgs)
}

func (s *sample) totalCmds() int64 {
	var n int64
	for _, v := range s.cmds {
		n += v
	}
	return n
}

// meter takes the snapshots a sample is the difference of.
type meter struct {
	admin     *redis.Client                 // INFO commandstats; nil: no command counts (SQL rows)
	serverCPU func() (time.Duration, error) // the server's CPU so far; nil: unknown

	t0    time.Time
	cmds0 map[string]int64
	srv0  time.Duration
	srvOK bool
	cli0  time.Duration
	mem0  uint64
}

func (m *meter) start(ctx context.Context) error {
	runtime.GC()
	var err error
	if m.admin != nil {
		if m.cmds0, err = commandStats(ctx, m.admin); err != nil {
			return fmt.Errorf("info commandstats: %w", err)
		}
	}
	m.srvOK = false
	if m.serverCPU != nil {
		m.srv0, err = m.serverCPU()
		m.srvOK = err == nil
	}
	m.cli0 = rusageCPU()
	m.mem0 = mallocs()
	m.t0 = time.Now()
	return nil
}

func (m *meter) stop(ctx context.Context, msgs int) (*sample, error) {
	s := &sample{elapsed: time.Since(m.t0), msgs: msgs}
	s.mallocs = mallocs() - m.mem0
	s.cliCPU = rusageCPU() - m.cli0
	if m.srvOK {
		if srv, err := m.serverCPU(); err == nil {
			s.srvCPU, s.srvOK = srv-m.srv0, true
		}
	}
	s.cmds = map[string]int64{}
	if m.admin == nil {
		return s, nil
	}
	cmds, err := commandStats(ctx, m.admin)
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	for k, v := range cmds {
		if d := v - m.cmds0[k]; d > 0 {
			s.cmds[k] = d
		}
	}
	return s, nil
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// counter counts messages reaching their final state and closes done at the target.
type counter struct {
	n       atomic.Int64
	settled atomic.Int64 // deliveries settled, final or not (a capped retry run rates these)
	target  int64
	once    sync.Once
	done    chan struct{}
}

func newCounter(target int) *counter {
	return &counter{target: int64(target), done: make(chan struct{})}
}

func (c *counter) add(n int) {
	if c.n.Add(int64(n)) >= c.target {
		c.once.Do(func() { close(c.done) })
	}
}

// lateness records, per message, when its delayed retry was due and how late it came:
// to its handler, and (a stream's retry copy) back into the stream, by the ms of the
// copy's entry id. The two differ by the wait behind entries not read yet: when the
// first pass over the N messages takes longer than the delay, due copies queue behind
// the originals still unread, which is the consumers' throughput, not the delay's.
type lateness struct {
	due  []atomic.Int64 // unix ns, by message index
	mu   sync.Mutex
	late []time.Duration
	back []time.Duration
}

func newLateness(n int) *lateness { return &lateness{due: make([]atomic.Int64, n)} }

func (l *lateness) setDue(idx int, t time.Time) {
	if idx >= 0 && idx < len(l.due) {
		l.due[idx].Store(t.UnixNano())
	}
}

func (l *lateness) seen(idx int, now time.Time) {
	if idx < 0 || idx >= len(l.due) {
		return
	}
	d := l.due[idx].Load()
	if d == 0 {
		return
	}
	l.mu.Lock()
	l.late = append(l.late, time.Duration(now.UnixNano()-d))
	l.mu.Unlock()
}

// written records when message idx's retry copy was written to its stream: id is the
// copy's entry id ("ms-seq"; anything else is not a stream id and is ignored).
func (l *lateness) written(idx int, id string) {
	ms, _, ok := strings.Cut(id, "-")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || idx < 0 || idx >= len(l.due) {
		return
	}
	d := l.due[idx].Load()
	if d == 0 {
		return
	}
	l.mu.Lock()
	l.back = append(l.back, time.Duration(at*int64(time.Millisecond)-d))
	l.mu.Unlock()
}

func (l *lateness) values() (late, back []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.late), slices.Clone(l.back)
}

// payloadSize is the size of every benchmark message's payload.
const payloadSize = 100

// payload is message i's payload: its index in 8 digits, then filler.
func payload(i int) []byte {
	b := make([]byte, payloadSize)
	copy(b, fmt.Sprintf("%08d", i))
	for j := 8; j < payloadSize; j++ {
		b[j] = 'x'
	}
	return b
}

// index reads a payload's message index (-1 when it has none).
func index(p []byte) int {
	if len(p) < 8 {
		return -1
	}
	i, err := strconv.Atoi(string(p[:8]))
	if err != nil {
		return -1
	}
	return i
}

// failing reports whether message i is one of the 10% that always fail (dlq scenario).
func failing(i int) bool { return i%10 == 0 }

// publishStream appends n messages to key in pipelined batches; fields gives each
// message's fields.
func publishStream(ctx context.Context, rdb *redis.Client, key string, n int, fields func(i int) []any) error {
	for lo := 0; lo < n; lo += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < min(lo+1000, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: fields(i)})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("publish to %s: %w", key, err)
		}
	}
	return nil
}

// publishList pushes n bare payloads to the tail of key.
func publishList(ctx context.Context, rdb *redis.Client, key string, n int) error {
	for lo := 0; lo < n; lo += 1000 {
		vals := make([]any, 0, 1000)
		for i := lo; i < min(lo+1000, n); i++ {
			vals = append(vals, payload(i))
		}
		if err := rdb.RPush(ctx, key, vals...).Err(); err != nil {
			return fmt.Errorf("publish to %s: %w", key, err)
		}
	}
	return nil
}

// percentile returns the p-th percentile (0..1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// topCommands formats the commands of a sample, most called first.
func topCommands(cmds map[string]int64, msgs int) string {
	names := slices.Collect(maps.Keys(cmds))
	slices.SortFunc(names, func(a, b string) int { return int(cmds[b] - cmds[a]) })
	out := ""
	for _, k := range names {
		out += fmt.Sprintf(" %s=%.3f", k, float64(cmds[k])/float64(msgs))
	}
	return out
}
