// Command settle shows an operator what settle holds in Redis and in SQL inboxes and acts
// on it: the dead letters of a dead-letter stream (list them grouped by reason, error and
// source, show one decoded, replay or purge a filtered selection, export and import them
// as NDJSON), a stream's consumer group and its pending entries (release one, dead-letter
// one, prune idle consumers, seek the group), a durable delay set (promote or cancel
// members), an inbox's groups and dead rows (settle inbox), and one screen of counts for
// the keys it is pointed at. Every view and action is a call of the library's operator
// API: github.com/settlekit/settle/admin, and the inbox's methods.
//
// Run it from the repository root with
//
//	go run ./cmd/settle --help
//	go run ./cmd/settle --redis redis://127.0.0.1:6379/0 dlq ls '{refunds}.dlq'
//	go run ./cmd/settle dlq replay '{refunds}.dlq' --reason unavailable --rate 50
//
// or install it with go install github.com/settlekit/settle/cmd/settle.
//
// # Connection
//
// --redis URL, else the environment variable SETTLE_REDIS_URL, else
// redis://127.0.0.1:6379/0 (redis:// or rediss://, as redis.ParseURL reads them).
//
// # Output
//
// Tables for a person by default; --json prints JSON instead: one object per line for
// lists (entries, replayed dead letters, the keys of stats), one object for a view.
//
// # Destructive actions
//
// dlq replay|purge|import, pending release|dead, consumers prune, delayed
// promote|cancel, seek and inbox dead replay|purge change what is stored. Each first checks the
// whole selection (and reports what it would do), then asks for confirmation on a
// terminal; without a terminal it refuses unless --yes is given. --dry-run reports
// what would change and changes nothing.
//
// # Exit codes
//
//	0  success
//	1  an error: the command was refused (a missing key, a key of the wrong type, an id
//	   not found, a regexp or time that does not parse, a destination in another cluster
//	   slot, no confirmation) or Redis failed; nothing was changed unless the message
//	   says what was
//	2  a usage error: an unknown command or flag, a wrong number of arguments, a flag
//	   value of the wrong type
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
