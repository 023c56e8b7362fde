// Command settle shows an operator what settle holds in Redis and in SQL inboxes and acts
// on it: the dead letters of a dead-letter stream (list them grouped by reason, error and
// source, show one decoded, replay or purge a filtered selection, export and import them
// as NDJSON), a stream's consumer group and its pending entries (release one, dead-letter
// one, prune idle consumers, seek the group), a durable delay set (promote or cancel
// members), an inbox's groups and dead rows (settle inbox), one screen of counts for
// the keys it is pointed at or the mounts its config file names, and where a message is
// (settle find: every copy of it by an id, its origin id or a header). Every view and action is a call of the library's operator
// API: github.com/settlekit/settle/admin, and the inbox's methods.
//
// Run it from the repository root with
//
//	go run ./cmd/settle --help
//	go run ./cmd/settle --redis redis://127.0.0.1:6379/0 dlq ls '{refunds}.dlq'
//	go run ./cmd/settle dlq replay '{refunds}.dlq' --reason unavailable --rate 50
//
// or install a release with go install github.com/settlekit/settle/cmd/settle@v0.1.0
// (settle --version prints the release it was installed at).
//
// # Connection
//
// One rule for every connection: the flag, else the environment variable, else the
// config file, else the default. Redis: --redis URL, else SETTLE_REDIS_URL, else
// SETTLE_REDIS_CLUSTER (a cluster's nodes), else the "redis" of --config, else
// redis://127.0.0.1:6379/0 (redis:// or rediss://, as redis.ParseURL reads them). The
// database of the inbox commands: --dsn, else SETTLE_DSN, else the "dsn" of --config.
//
// # Config file
//
// --config FILE names which keys belong together, in JSON: the Redis mounts (each one
// settle mount's stream and group, or its list, with its delay set and dead letter)
// and the SQL inboxes (each table, its columns, its groups and dead letters):
//
//	{
//	  "redis": "redis://127.0.0.1:6379/0",
//	  "mounts": [
//	    {"name": "refunds", "kind": "stream", "key": "{refunds}", "group": "refunds",
//	     "delayed": "{refunds}.delayed", "dead_letter": "{refunds}.dlq"},
//	    {"name": "jobs", "kind": "reliable-list", "key": "{jobs}", "dead_letter": "{jobs}.dlq"}
//	  ],
//	  "dsn": "postgres://app@db:5432/app",
//	  "inboxes": [{"name": "mailer", "table": {"name": "mail_jobs", "group": "name"},
//	               "groups": ["emails"], "dead": ["emails.dead"]}]
//	}
//
// A mount's kind is stream, claiming-stream, list or reliable-list; its key is
// required, a stream kind needs its group and a list kind takes none; delayed,
// dead_letter and replies (the streams its handlers reply to, which settle find
// searches) are optional; its name (for --mount) defaults to its key. A file with an
// unknown field, a mount of an unknown kind or without its key is refused (exit 1)
// naming it. settle stats --config FILE with no keys shows every mount (and whether it
// is paused) and every inbox group of the file; --mount NAME one mount. settle web
// --config FILE serves the web console (github.com/settlekit/settle/console) for them all.
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
