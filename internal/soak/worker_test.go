package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/ledger"
)

// envWorker carries a worker process's configuration (JSON); TestSoakWorker does
// nothing without it.
const envWorker = "SETTLE_SOAK_WORKER"

// headerID carries a message's own id on transports with headers (its payload carries
// it too, except for poison messages).
const headerID = "soak-id"

// The transports a worker can consume.
const (
	transportStream      = "stream"      // Stream + Reclaim, in-process delays
	transportClaiming    = "claiming"    // ClaimingStream
	transportZset        = "zset"        // Stream + Reclaim + DurableZset delays
	transportReliable    = "reliable"    // ReliableList
	transportInbox       = "inbox"       // SQL inbox on PostgreSQL
	transportPartitioned = "partitioned" // PartitionedStream with Ordered (partitioned_test.go)
)

// exitPoison is the exit code of a worker whose handler met the poison message that
// makes the process exit.
const exitPoison = 3

// workerConcurrency is every worker's Concurrency.
const workerConcurrency = 8

// workerConfig is one worker process's configuration.
type workerConfig struct {
	Cap         int
	Cluster     string // a Redis Cluster's addresses, comma-separated (transportPartitioned)
	Consumer    string
	Crash       *crashSpec // crash-point tests (crashpoint_test.go): their handler, points and crash
	DeadLetter  string
	Delays      string // the DurableZset key (transportZset)
	Idle        time.Duration
	Key         string // stream or list key, or inbox table
	Limits      bool   // the flow limits and Dedupe on the mount (limits_test.go)
	Ledger      string
	LeaseLog    string        // the file each lease call is appended to (transportPartitioned)
	LeaseTTL    time.Duration // the PartitionedStream's LeaseTTL
	Partitions  int           // the PartitionedStream's Partitions
	Poison      bool          // poison-message handler instead of the soak's
	Reply       string        // ReplyTo: the crash-point life answers its acked message with a reply
	PostgresURL string
	RedisURL    string
	Seed        int64
	Transport   string
}

// TestSoakWorker is the consumer process of the soaks and poison tests: it consumes
// until SIGTERM, recording every run, outcome and settlement in the ledger. It does
// nothing unless started by them.
func TestSoakWorker(t *testing.T) {
	raw := os.Getenv(envWorker)
	if raw == "" {
		t.Skip("helper process: runs only when started by the soak and poison tests")
	}
	// First of all: a SIGTERM from here on is a graceful stop.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	w, err := ledger.Open(cfg.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}

	durableDelays := cfg.Transport == transportZset || cfg.Transport == transportInbox
	// Settlements are reported by delivery id; the handler maps them to message ids.
	var ids sync.Map
	delivery := deliveryName(cfg.Transport)
	app, err := settle.New(settle.Config{
		// Info: the rare lines a failure needs explained (a settlement written again
		// without a run); the retries' lines are at Debug.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Deduplicated {
				// Acked without a run: its Dedupe key was completed (limits_test.go).
				id := ""
				if v, ok := ids.LoadAndDelete(dedupSettleKey(s.ID, s.Attempt)); ok {
					id = v.(string)
				}
				if err := w.Settle(id, s.Attempt, s.ID, actionDeduplicated, s.Err); err != nil {
					panic(err)
				}
				return
			}
			if s.Action == settle.ActionPark && !durableDelays {
				// An in-process delay is reported once scheduled; the settlement is the
				// copy written when it comes due (reported again, as a copy).
				return
			}
			id, d := "", delivery(s.Key, s.ID)
			if v, ok := ids.LoadAndDelete(settleKey(d, s.Attempt)); ok {
				id = v.(string)
			}
			if err := w.Settle(id, s.Attempt, d, s.Action.String(), s.Err); err != nil {
				panic(err)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var h settle.Handler = settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		return soakOutcome(cfg.Seed, messageID(m), m.Attempt)
	})
	if cfg.Poison {
		h = poisonHandler(w)
	}
	var crash *crasher
	if cfg.Crash != nil {
		h = crashHandler(cfg.Cap, cfg.Reply != "")
		if crash, err = newCrasher(cfg.Crash); err != nil {
			t.Fatal(err)
		}
	}
	opts := []settle.MountOption{
		settle.Use(record(w, &ids, delivery)),
		settle.MaxAttempts(cfg.Cap),
		settle.DeadLetter(cfg.DeadLetter),
		settle.Concurrency(workerConcurrency),
	}
	if cfg.Reply != "" {
		opts = append(opts, settle.ReplyTo(cfg.Reply))
	}
	if cfg.Limits {
		opts = append(opts, limitOptions(w, &ids)...)
	}

	var src settle.Source
	var rdb *redis.Client
	if cfg.RedisURL != "" {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			t.Fatal(err)
		}
		rdb = redis.NewClient(opt)
		defer rdb.Close()
		crash.hookRedis(rdb)
	}
	block := settle.Block(200 * time.Millisecond)
	switch cfg.Transport {
	case transportStream:
		src = settle.Stream(rdb, cfg.Key, "g", settle.Consumer(cfg.Consumer), settle.Reclaim(cfg.Idle), block)
	case transportZset:
		src = settle.Stream(rdb, cfg.Key, "g", settle.Consumer(cfg.Consumer), settle.Reclaim(cfg.Idle), block)
		opts = append(opts, settle.DelayIn(delayed.DurableZset{Key: cfg.Delays}))
	case transportClaiming:
		src = settle.ClaimingStream(rdb, cfg.Key, "g", cfg.Idle, settle.Consumer(cfg.Consumer), block)
	case transportReliable:
		src = settle.ReliableList(rdb, cfg.Key, settle.Consumer(cfg.Consumer), settle.Heartbeat(cfg.Idle), settle.Block(time.Second))
	case transportPartitioned:
		src, h = partitionedSource(t, cfg, rdb), orderedHandler(cfg.Seed)
		opts = append(opts, settle.Ordered())
	case transportInbox:
		db, err := openInboxDB(cfg.PostgresURL, crash)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		src = inbox.New(db, inbox.Postgres, inboxTable(cfg.Key)).Queue("work", inbox.Lease(cfg.Idle), inbox.Poll(50*time.Millisecond))
	default:
		t.Fatalf("unknown transport %q", cfg.Transport)
	}
	app.Mount(src, h, opts...)

	if err := app.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
}

// settleKey keys a delivery's message id until its settlement is reported.
func settleKey(delivery string, attempt int) string {
	return delivery + "/" + strconv.Itoa(attempt)
}

// messageID is a message's own id: its header, or else the one its payload carries.
func messageID(m *settle.Message) string {
	if id, ok := m.Headers[headerID]; ok {
		return id
	}
	return payloadID(m.Payload)
}

// payloadID is the id a payload carries, for a transport without headers (the inbox):
// a poison test's payload carries it in poisonPayload.ID, an undecodable one after its
// leading undecodableByte; a soak's payload is the id itself.
func payloadID(payload []byte) string {
	if len(payload) > 0 && payload[0] == undecodableByte {
		return string(payload[1:])
	}
	var p poisonPayload
	if len(payload) > 0 && payload[0]&0xf0 == 0x80 { // a msgpack map
		if err := settle.Msgpack.Unmarshal(payload, &p); err == nil && p.ID != "" {
			return p.ID
		}
	}
	return string(payload)
}

// undecodableByte is a byte msgpack never uses: a payload starting with it does not
// decode.
const undecodableByte = 0xc1

// deliveryName names a delivery in the ledger from where it was read and its id there:
// its id, unique in its stream, list or table; on a PartitionedStream, whose partitions
// are streams that may give two entries one id, the partition's key and the id.
func deliveryName(transport string) func(key, id string) string {
	if transport == transportPartitioned {
		return func(key, id string) string { return key + " " + id }
	}
	return func(_, id string) string { return id }
}

// record is the middleware writing each run and its outcome to the ledger (a panic is
// recorded, then goes on to the engine); delivery names a delivery (deliveryName).
func record(w *ledger.Writer, ids *sync.Map, delivery func(key, id string) string) settle.Middleware {
	return func(next settle.Handler) settle.Handler {
		return settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			id, d := messageID(m), delivery(m.Key, m.ID)
			ids.Store(settleKey(d, m.Attempt), id)
			if err := w.Run(id, m.Attempt, d); err != nil {
				panic(err)
			}
			defer func() {
				if r := recover(); r != nil {
					_ = w.Outcome(id, m.Attempt, d, "panic")
					panic(r)
				}
			}()
			err := next.Handle(ctx, m)
			if err := w.Outcome(id, m.Attempt, d, string(settle.OutcomeOf(err).Kind)); err != nil {
				panic(err)
			}
			return err
		})
	}
}

// soakOutcome is the soak handler's answer for one delivery, a pure function of the
// seed, the message and the attempt: 5% of messages always fail (dead-lettered at the
// cap); otherwise each attempt fails with Retry 20% of the time, RetryAfter (10–100ms)
// 10%, Drop 3%, and acks the rest. 2–20ms of work widen the window in which a kill
// finds the message in flight.
func soakOutcome(seed int64, id string, attempt int) error {
	work := 2*time.Millisecond + time.Duration(unit(seed, id, attempt+1000)*float64(18*time.Millisecond))
	time.Sleep(work) // the handler's own work, not a wait for anything
	if alwaysFails(seed, id) {
		return errors.New("soak: this message always fails")
	}
	switch u := unit(seed, id, attempt); {
	case u < 0.20:
		return settle.Retry(errors.New("soak: retry"))
	case u < 0.30:
		return settle.RetryAfter(10*time.Millisecond+time.Duration(unit(seed, id, attempt+2000)*90)*time.Millisecond, errors.New("soak: retry after"))
	case u < 0.33:
		return settle.Drop(errors.New("soak: drop"))
	}
	return nil
}

// alwaysFails reports whether id is one of the 5% of messages whose every attempt fails.
func alwaysFails(seed int64, id string) bool { return unit(seed, id, -1) < 0.05 }

// unit maps (seed, id, n) to [0, 1), the same in every process.
func unit(seed int64, id string, n int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s\x00%d", seed, id, n)
	// FNV alone mixes its last bytes poorly into its high bits: finish with splitmix64's.
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / float64(1<<53)
}

// poisonPayload is the payload of the poison tests' messages.
type poisonPayload struct {
	ID   string // the message's id (the inbox has no headers to carry it)
	Kind string // "panic", "exit" or "ok"
}

// poisonHandler panics on a "panic" message, exits the process on an "exit" one (after
// recording the outcome: the exit skips the record middleware), fails to decode an
// undecodable payload, and acks the rest.
func poisonHandler(w *ledger.Writer) settle.Handler {
	return settle.Typed(func(ctx context.Context, m *settle.Message, p poisonPayload) error {
		switch p.Kind {
		case "panic":
			panic("soak: poison message")
		case "exit":
			_ = w.Outcome(messageID(m), m.Attempt, m.ID, "exit")
			os.Exit(exitPoison)
		}
		return nil
	})
}

// inboxTable is the spec of a soak's inbox table.
func inboxTable(name string) inbox.Table {
	return inbox.Table{Attempt: "attempt", Group: "grp", ID: "id", LockedUntil: "locked_until", Name: name, Payload: "payload", RetryAfter: "retry_after"}
}
