// Package soak holds settle's kill -9 soaks and poison-message tests: its tests start
// consumer processes (the test binary itself, re-executed to run TestSoakWorker), kill
// them with SIGKILL at seeded random moments, restart them until the transport is
// drained, and judge the run with the ledger oracle (internal/ledger). The Redis restart
// test runs the same workers against a redis-server of its own (appendonly, appendfsync
// always, on a free loopback port, in a temporary directory), which it kills with
// SIGKILL and restarts mid-run while the workers, never restarted, reconnect on their
// own. The crash-point test kills a worker right before or right after each settlement
// call of a transport's life (a go-redis hook, a database/sql driver wrapper) and checks
// that a fresh worker leaves each message in exactly one place.
//
// The partitioned soak runs four members of a PartitionedStream read with Ordered, one
// killed mid-run, and also judges every lease call its members made (a go-redis hook
// appends each to a file beside the ledger): one holder per partition at a time, and
// the killed member's partitions moved within the lease TTL. It runs on a Redis
// Cluster (SETTLE_REDIS_CLUSTER) and on one Redis (SETTLE_REDIS_URL).
//
// The soaks need real servers: SETTLE_REDIS_URL (and SETTLE_POSTGRES_URL for the SQL
// inbox); they skip with a message otherwise. SETTLE_SOAK=full runs 10,000 messages per
// transport instead of 1,000; SETTLE_SOAK_SEED replays a run's kill schedule and
// handler outcomes (every run logs its seed).
package soak
