package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// EnvRedisCluster names the environment variable read when neither --redis nor
// SETTLE_REDIS_URL is given: the comma-separated addresses of a Redis Cluster's nodes.
const EnvRedisCluster = "SETTLE_REDIS_CLUSTER"

// redisTarget returns where to connect and who said so, by the one rule of every
// connection (the flag, else the environment, else the config file, else the default):
// --redis, else SETTLE_REDIS_URL, else SETTLE_REDIS_CLUSTER (a cluster), else the
// "redis" of the config file fc (nil without one), else the default URL. A comma in
// --redis, SETTLE_REDIS_URL or the file's "redis" lists a cluster's nodes.
func (a *app) redisTarget(fc *fileConfig) (raw, from string, cluster bool) {
	switch {
	case a.redisURL != "":
		return a.redisURL, "--redis", a.cluster || strings.Contains(a.redisURL, ",")
	case os.Getenv(EnvRedisURL) != "":
		raw = os.Getenv(EnvRedisURL)
		return raw, EnvRedisURL, a.cluster || strings.Contains(raw, ",")
	case os.Getenv(EnvRedisCluster) != "":
		return os.Getenv(EnvRedisCluster), EnvRedisCluster, true
	case fc != nil && fc.Redis != "":
		return fc.Redis, "the redis of " + a.configPath, a.cluster || strings.Contains(fc.Redis, ",")
	}
	return defaultRedisURL, "the default Redis URL", a.cluster
}

// newClusterClient returns a Redis Cluster client of raw: comma-separated seed nodes,
// each an address (127.0.0.1:7001) or a redis:// or rediss:// URL whose user, password
// and TLS the first URL gives to all. The database number of a URL must be 0.
func newClusterClient(raw string) (*redis.ClusterClient, error) {
	opt := &redis.ClusterOptions{}
	urlSeen := false
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("an empty node address in the list")
		}
		if !strings.Contains(part, "://") {
			opt.Addrs = append(opt.Addrs, part)
			continue
		}
		o, err := redis.ParseURL(part)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", safe(part), err)
		}
		if o.DB != 0 {
			return nil, fmt.Errorf("node %q: database %d: a Redis Cluster has only database 0", safe(part), o.DB)
		}
		if !urlSeen {
			urlSeen = true
			opt.Username, opt.Password, opt.TLSConfig = o.Username, o.Password, o.TLSConfig
		}
		opt.Addrs = append(opt.Addrs, o.Addr)
	}
	return redis.NewClusterClient(opt), nil
}
