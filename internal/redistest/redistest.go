// Package redistest gives each test a Redis: an embedded miniredis by default, or the
// real server named by SETTLE_REDIS_URL, where every key the test makes carries its own
// prefix and is deleted when the test ends (never FLUSHDB: the server is shared).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvURL names the environment variable that points tests at a real Redis.
const EnvURL = "SETTLE_REDIS_URL"

// Redis is one test's Redis.
type Redis struct {
	// Client is connected to the server; it is closed when the test ends.
	Client *redis.Client
	// Mini is the embedded server, nil on a real server.
	Mini *miniredis.Miniredis
	// Prefix starts every key the test should use; it holds a {hash tag}, so keys that
	// share it share a cluster slot.
	Prefix string
}

// Real reports whether tests run against a real server.
func Real() bool { return os.Getenv(EnvURL) != "" }

// New returns a Redis for t: miniredis, or the real server when SETTLE_REDIS_URL is set.
func New(t testing.TB) *Redis {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	r := &Redis{Prefix: "{t" + hex.EncodeToString(b[:]) + "}:"}
	if url := os.Getenv(EnvURL); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvURL, url, err)
		}
		r.Client = redis.NewClient(opt)
		if err := r.Client.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("%s=%q: ping: %v", EnvURL, url, err)
		}
		t.Cleanup(func() { r.cleanup(t) })
		return r
	}
	r.Mini = miniredis.RunT(t)
	r.Client = redis.NewClient(&redis.Options{Addr: r.Mini.Addr()})
	t.Cleanup(func() { _ = r.Client.Close() })
	return r
}

// Key returns the test's key for name.
func (r *Redis) Key(name string) string { return r.Prefix + name }

// RealOnly skips t unless it runs against a real server, saying so.
func RealOnly(t testing.TB) {
	t.Helper()
	if !Real() {
		t.Skipf("needs a real Redis: set %s (e.g. redis://127.0.0.1:6379/0)", EnvURL)
	}
}

func (r *Redis) cleanup(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := r.Client.Scan(ctx, cursor, r.Prefix+"*", 1000).Result()
		if err != nil {
			t.Logf("redistest: scan %s*: %v", r.Prefix, err)
			break
		}
		if len(keys) > 0 {
			if err := r.Client.Del(ctx, keys...).Err(); err != nil {
				t.Logf("redistest: del: %v", err)
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	_ = r.Client.Close()
}

// Untagged returns a name of t's own that holds no {hash tag} (a partitioned stream's,
// whose partitions' tags are made from it), ending in suffix; the key name and every key
// starting with "{name" are deleted when the test ends.
func (r *Redis) Untagged(t testing.TB, suffix string) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "t" + hex.EncodeToString(b[:]) + "-" + suffix
	t.Cleanup(func() {
		ctx := context.Background()
		for _, pattern := range []string{name, "{" + name + "*"} {
			if ks, _ := r.Client.Keys(ctx, pattern).Result(); len(ks) > 0 {
				r.Client.Del(ctx, ks...)
			}
		}
	})
	return name
}
