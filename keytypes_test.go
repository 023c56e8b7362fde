package settle_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
)

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
				opts := []settle.MountOption{settle.Name("m"), settle.MaxAttempts(3)}
				switch which {
				case "delay":
					opts = append(opts, settle.DelayIn(delayed.DurableZset{Key: bad}))
				case "dead-letter":
					opts = append(opts, settle.DeadLetter(bad))
				case "reply":
					opts = append(opts, settle.ReplyTo(bad))
				}
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
