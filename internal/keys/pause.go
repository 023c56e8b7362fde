package keys

// Paused is the control key that pauses the mounts reading key from outside their
// process: while it exists they fetch nothing new (they finish and settle what they
// hold). group is a stream's consumer group; "" for a list. It hashes to key's cluster
// slot (see Derived): "{orders}:paused:workers" for the stream "orders" and its group
// "workers", "{jobs}:paused" for the list "jobs", "{refunds}:in:paused:g" for
// "{refunds}:in". The transports check it and settle/admin writes it: both name it here.
func Paused(key, group string) string {
	if group == "" {
		return Derived(key, "paused")
	}
	return Derived(key, "paused:"+group)
}
