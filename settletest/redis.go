package settletest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/redistest"
)

// EnvRedisURL names the environment variable that points tests at a real Redis server
// (e.g. redis://127.0.0.1:6379/0) instead of an embedded miniredis.
const EnvRedisURL = "SETTLE_REDIS_URL"

// Server is one test's Redis.
type Server struct {
	// Client is connected to the server; it is closed when the test ends.
	Client *redis.Client
	// Mini is the embedded miniredis, nil on a real server.
	Mini *miniredis.Miniredis
	// Prefix starts every key the test should use. It is a {hash tag}, so the test's
	// keys share one cluster slot, and on a real server every key under it is deleted
	// when the test ends (never FLUSHDB: the server may be shared).
	Prefix string
}

// Redis returns a Redis for t: an embedded miniredis, or the real server named by
// SETTLE_REDIS_URL with a per-test key prefix. Use Key for every key.
func Redis(t testing.TB) *Server {
	t.Helper()
	r := redistest.New(t)
	return &Server{Client: r.Client, Mini: r.Mini, Prefix: r.Prefix}
}

// Key returns the test's key for name: Prefix + name.
func (s *Server) Key(name string) string { return s.Prefix + name }

// Real reports whether the server is a real Redis rather than miniredis.
func (s *Server) Real() bool { return s.Mini == nil }
