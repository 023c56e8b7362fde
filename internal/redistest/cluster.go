package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// EnvCluster names the environment variable that points tests at a Redis Cluster: the
// comma-separated addresses of its masters, e.g.
// "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003". .ci/run starts a 3-master cluster
// on free loopback ports and sets it.
const EnvCluster = "SETTLE_REDIS_CLUSTER"

// ClusterRedis is one test's Redis Cluster.
type ClusterRedis struct {
	// Client is a cluster client of the cluster; it is closed when the test ends.
	Client *redis.ClusterClient
	// Prefix starts every key the test should use: a {hash tag} of its own, so the keys
	// that share it share one slot (and so one master).
	Prefix string

	other string // another tag, in another slot (see Other)
}

// Key returns the test's key for name: Prefix + name, in the test's slot.
func (r *ClusterRedis) Key(name string) string { return r.Prefix + name }

// Other returns a key for name that carries another hash tag than Prefix and hashes to
// another slot: for tests of cross-slot configurations.
func (r *ClusterRedis) Other(name string) string { return r.other + name }

// Cluster returns a Redis Cluster for t, or skips t (saying why) when SETTLE_REDIS_CLUSTER
// is unset. It waits for the cluster to report cluster_state:ok. Every key the test
// makes must come from Key or Other; they are deleted when the test ends.
func Cluster(t testing.TB) *ClusterRedis {
	t.Helper()
	addrs := os.Getenv(EnvCluster)
	if addrs == "" {
		t.Skipf("needs a Redis Cluster: set %s to its masters' addresses (e.g. 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003; .ci/run starts one)", EnvCluster)
	}
	r := &ClusterRedis{
		Client: redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")}),
		Prefix: "{t" + randomHex() + "}:",
	}
	r.other = "{o" + randomHex() + "}:"
	for keys.Slot(r.other) == keys.Slot(r.Prefix) {
		r.other = "{o" + randomHex() + "}:"
	}
	if err := waitClusterOK(r.Client, addrs); err != nil {
		_ = r.Client.Close()
		t.Fatalf("%s=%q: %v", EnvCluster, addrs, err)
	}
	t.Cleanup(func() { r.cleanup(t) })
	return r
}

// clusterOK is checked once per test binary: the cluster does not go away mid-run.
var clusterOK struct {
	sync.Mutex
	ok bool
}

func waitClusterOK(c *redis.ClusterClient, addrs string) error {
	clusterOK.Lock()
	defer clusterOK.Unlock()
	if clusterOK.ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		switch {
		case err != nil:
			last = err
		case strings.Contains(info, "cluster_state:ok"):
			clusterOK.ok = true
			return nil
		default:
			last = errClusterNotOK
		}
		select {
		case <-ctx.Done():
			return last
		case <-tick.C:
		}
	}
}

var errClusterNotOK = clusterError("cluster_state is not ok")

type clusterError string

func (e clusterError) Error() string { return string(e) }

func (r *ClusterRedis) cleanup(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, prefix := range []string{r.Prefix, r.other} {
		err := r.Client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			var cursor uint64
			for {
				keys, next, err := node.Scan(ctx, cursor, prefix+"*", 1000).Result()
				if err != nil {
					return err
				}
				// One DEL per key: keys of two tags would be a cross-slot DEL.
				for _, k := range keys {
					if err := node.Del(ctx, k).Err(); err != nil {
						return err
					}
				}
				if next == 0 {
					return nil
				}
				cursor = next
			}
		})
		if err != nil {
			t.Logf("redistest: cleanup of %s*: %v", prefix, err)
		}
	}
	_ = r.Client.Close()
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
