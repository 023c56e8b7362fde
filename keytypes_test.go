package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/redistest"
)

// keyOption is the mount option that makes key the mount's delay set, dead-letter or
// reply destination (which).
func keyOption(which, key string) settle.MountOption {
	switch which {
	case "delay":
		return settle.DelayIn(delayed.DurableZset{Key: key})
	case "dead-letter":
		return settle.DeadLetter(key)
	default:
		return settle.ReplyTo(key)
	}
}

// TestRunRefusesAKeyTheMountWritesThatHoldsAnotherType: a delay set, dead-letter or reply
// destination holding another type (a string here) stops Run before the first delivery,
// naming the mount, the key, its type and the option; before, the mount started and
// then failed every settlement that wrote there (or stopped reading, for a delay set).
func TestRunRefusesAKeyTheMountWritesThatHoldsAnotherType(t *testing.T) {
	t.Parallel()
	sources := map[string]struct {
		src  func(rdb *redis.Client, key string) settle.Source
		keys []string // the options it takes: "delay", "dead-letter", "reply"
	}{
		"Stream": {func(rdb *redis.Client, key string) settle.Source { return settle.Stream(rdb, key, "g") },
			[]string{"delay", "dead-letter", "reply"}},
		"ClaimingStream": {func(rdb *redis.Client, key string) settle.Source {
			return settle.ClaimingStream(rdb, key, "g", time.Minute)
		}, []string{"delay", "dead-letter", "reply"}},
		"List": {func(rdb *redis.Client, key string) settle.Source { return settle.List(rdb, key) },
			[]string{"delay", "dead-letter"}},
		"ReliableList": {func(rdb *redis.Client, key string) settle.Source { return settle.ReliableList(rdb, key) },
			[]string{"delay", "dead-letter", "reply"}},
		"PubSub": {func(rdb *redis.Client, key string) settle.Source { return settle.PubSub(rdb, key) },
			[]string{"delay"}},
	}
	for name, s := range sources {
		for _, which := range s.keys {
			t.Run(name+"/"+which, func(t *testing.T) {
				t.Parallel()
				r := redistest.New(t)
				ctx := context.Background()
				bad := r.Key(which)
				if err := r.Client.Set(ctx, bad, "x", 0).Err(); err != nil {
					t.Fatal(err)
				}
				opts := []settle.MountOption{settle.Name("m"), settle.MaxAttempts(3), keyOption(which, bad)}
				app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				app.Mount(s.src(r.Client, r.Key("in")), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), opts...)
				runCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				err = app.Run(runCtx)
				if err == nil || runCtx.Err() != nil {
					t.Fatalf("Run = %v; want a refusal at once", err)
				}
				for _, want := range []string{"m", bad, "holds a string", which} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("Run = %v; want it to name %q", err, want)
					}
				}
			})
		}
	}
}

// TestAKeyThatChangesTypeWhileRunningIsNamedNotChargedAndBacksOff: a delay set,
// dead-letter or reply key that takes another type after Run checked it fails each
// settlement that writes there. The log line names the key, its type and the command;
// when the message comes back, after a growing backoff, the settlement its handler
// decided is written again without running the handler, so a failed write spends no
// attempt (before, each failure ran the handler again at one more attempt, and at the
// cap the engine dead-lettered it "by deliveries that never settled"; a reliable list,
// whose deliveries are named anew, runs the handler again at the same attempt); the
// mount's other messages settle meanwhile, and once the key is fixed the message
// settles as its handler asked.
func TestAKeyThatChangesTypeWhileRunningIsNamedNotChargedAndBacksOff(t *testing.T) {
	t.Parallel()
	publishStream := func(p *settle.Publisher, key, body string) error {
		_, err := p.Publish(context.Background(), key, body)
		return err
	}
	xlen := func(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
		return rdb.XLen(ctx, key).Result()
	}
	sources := map[string]struct {
		src     func(rdb *redis.Client, key string) settle.Source
		publish func(p *settle.Publisher, key string, body string) error
		read    func(ctx context.Context, rdb *redis.Client, key string) (int64, error)
	}{
		"Stream": {func(rdb *redis.Client, key string) settle.Source { return settle.Stream(rdb, key, "g") }, publishStream, xlen},
		"ClaimingStream": {func(rdb *redis.Client, key string) settle.Source {
			return settle.ClaimingStream(rdb, key, "g", 200*time.Millisecond)
		}, publishStream, xlen},
		"ReliableList": {
			func(rdb *redis.Client, key string) settle.Source { return settle.ReliableList(rdb, key) },
			func(p *settle.Publisher, key, body string) error {
				return p.PublishList(context.Background(), key, body)
			},
			func(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
				return rdb.LLen(ctx, key).Result()
			},
		},
	}
	for name, s := range sources {
		for _, which := range []string{"delay", "dead-letter", "reply"} {
			t.Run(name+"/"+which, func(t *testing.T) {
				t.Parallel()
				r := redistest.New(t)
				ctx := context.Background()
				in, bad := r.Key("in"), r.Key(which)
				const maxAttempts = 2
				opts := []settle.MountOption{settle.Name("m"), settle.MaxAttempts(maxAttempts), keyOption(which, bad),
					settle.Backoff(func(int, error) time.Duration { return time.Millisecond })}
				var mu sync.Mutex
				var poisonAttempts []int
				runs := make(chan string, 100)
				h := settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
					var body string
					if err := m.Decode(&body); err != nil {
						return err
					}
					if body == "poison" {
						mu.Lock()
						poisonAttempts = append(poisonAttempts, m.Attempt)
						mu.Unlock()
					}
					runs <- body
					if body != "poison" {
						return nil
					}
					switch which {
					case "delay":
						if m.Attempt == 1 {
							return settle.RetryAfter(10*time.Millisecond, errors.New("later"))
						}
						return nil
					case "dead-letter":
						return errors.New("poison")
					default:
						return m.Reply("answer")
					}
				})
				logs := logtest.New()
				final := make(chan settle.Settled, 10)
				app, err := settle.New(settle.Config{Logger: logs.Logger(), Hooks: settle.Hooks{Settled: func(_ context.Context, ev settle.Settled) {
					if ev.Final() {
						final <- ev
					}
				}}})
				if err != nil {
					t.Fatal(err)
				}
				app.Mount(s.src(r.Client, in), h, opts...)
				runCtx, cancel := context.WithCancel(ctx)
				errc := make(chan error, 1)
				go func() { errc <- app.Run(runCtx) }()
				defer func() {
					cancel()
					if err := <-errc; err != nil {
						t.Errorf("Run: %v", err)
					}
				}()
				pub := settle.NewPublisher(r.Client)
				waitRun := func(want string) {
					t.Helper()
					timeout := time.After(20 * time.Second)
					for {
						select {
						case got := <-runs:
							if got == want {
								return
							}
						case <-timeout:
							t.Fatalf("%q was not handled", want)
						}
					}
				}
				if err := s.publish(pub, in, "first"); err != nil {
					t.Fatal(err)
				}
				waitRun("first") // Run checked the keys and reads
				<-final
				if err := r.Client.Set(ctx, bad, "x", 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := s.publish(pub, in, "poison"); err != nil {
					t.Fatal(err)
				}
				// Three failed writes of the settlement its handler decided: each time the
				// message comes back it is written again, without running the handler.
				const wrongType = "a key it writes holds another type"
				for deadline := time.Now().Add(30 * time.Second); logs.Count(slog.LevelError, wrongType) < 3; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d failed writes logged, want 3", logs.Count(slog.LevelError, wrongType))
					}
				}
				if err := s.publish(pub, in, "other"); err != nil {
					t.Fatal(err)
				}
				waitRun("other")
				if ev := <-final; ev.Err != nil || ev.Action != settle.ActionAck {
					t.Fatalf("the other message: %+v, want it acked while the key is wrong", ev)
				}
				lines := logs.Containing(wrongType)
				if len(lines) == 0 {
					t.Fatal("no log line says a key holds another type")
				}
				for _, want := range []string{bad, "holds a string", map[string]string{"delay": "ZADD", "dead-letter": "XADD", "reply": "XADD"}[which]} {
					if name == "ReliableList" && want == "XADD" {
						want = "RPUSH"
					}
					if !strings.Contains(lines[0].Attrs["cause"], want) {
						t.Fatalf("log line %s: want it to name %q", lines[0], want)
					}
				}
				if err := r.Client.Del(ctx, bad).Err(); err != nil {
					t.Fatal(err)
				}
				var ev settle.Settled
				select {
				case ev = <-final:
				case <-time.After(20 * time.Second):
					t.Fatal("the message did not settle once the key was fixed")
				}
				mu.Lock()
				seen := slices.Clone(poisonAttempts)
				mu.Unlock()
				want := map[string][]int{"dead-letter": {1, 2}, "delay": {1, 2}, "reply": {1}}[which]
				if name == "ReliableList" {
					// Each delivery of a reliable list has a new id, so the failed settlement
					// is not found: the handler runs again, at the attempt it had (a re-read
					// of the consumer's own processing list counts nothing).
					var runs []int
					for i, a := range seen {
						if i == 0 || a != seen[i-1] {
							runs = append(runs, a)
						}
					}
					seen = runs
				}
				if !slices.Equal(seen, want) {
					t.Fatalf("the handler ran at attempts %v, want %v: a failed write ran it again or charged an attempt", seen, want)
				}
				switch which {
				case "dead-letter":
					if ev.Action != settle.ActionDeadLetter || ev.Attempt != maxAttempts || strings.Contains(errString(ev.HandlerErr), "never settled") {
						t.Fatalf("final settlement %+v; want a dead letter at attempt %d by the handler's error", ev, maxAttempts)
					}
				case "delay":
					if ev.Action != settle.ActionAck || ev.Attempt != 2 {
						t.Fatalf("final settlement %+v; want an ack at attempt 2", ev)
					}
				default:
					if ev.Action != settle.ActionReply || ev.Attempt != 1 {
						t.Fatalf("final settlement %+v; want the reply written at attempt 1", ev)
					}
				}
				if n, err := s.read(ctx, r.Client, bad); which != "delay" && (err != nil || n != 1) {
					t.Fatalf("%s holds %d (%v); want the one %s", bad, n, err, which)
				}
			})
		}
	}
}
