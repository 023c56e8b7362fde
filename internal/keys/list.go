package keys

import "strings"

// Derived returns the name of a key derived from key (a reliable list's processing
// list, its heartbeat, …) that hashes to key's cluster slot: key + ":" + suffix when key
// carries a {hash tag}, else "{" + key + "}:" + suffix, whose tag is the whole of key.
func Derived(key, suffix string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key + ":" + suffix
		}
	}
	return "{" + key + "}:" + suffix
}

// ListProcessing is the processing list of consumer on the reliable list key: where
// the consumer moves an item while its handler runs.
func ListProcessing(key, consumer string) string {
	return Derived(key, "processing:"+consumer)
}

// ListHeartbeat is consumer's heartbeat key on the reliable list key: it exists while the
// consumer is alive; once it expires, the consumer's processing list is orphaned.
func ListHeartbeat(key, consumer string) string {
	return Derived(key, "heartbeat:"+consumer)
}

// ListConsumers is the set of consumer names that have read the reliable list key: where
// orphan recovery looks for processing lists.
func ListConsumers(key string) string {
	return Derived(key, "consumers")
}

// Limit is the state of one flow limit of the mounts reading key (group: a stream's
// consumer group, "" for a list): kind names the limit ("rate", "slots"), value the key
// value a RateLimitBy or ConcurrencyBy computed ("" for a mount-wide limit). It hashes
// to key's cluster slot whatever value holds: "{orders}:limit:workers:rate:acct-7".
func Limit(key, group, kind, value string) string {
	return Derived(key, "limit:"+group+":"+kind+":"+value)
}

// LimitWaiting is where the processes reading key (group as Limit's) record how many of
// their deliveries wait for its flow limits: "{orders}:limit:workers:waiting:".
func LimitWaiting(key, group string) string {
	return Limit(key, group, "waiting", "")
}
