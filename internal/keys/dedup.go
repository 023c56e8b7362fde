package keys

// Dedup is the mark set of settle.Dedupe for the source key read by group ("" for a
// source without groups, a reliable list): a sorted set of the dedup keys completed
// within the window, in key's cluster slot, so that the ack script writes the marks.
// Each group keeps its own: a key completed by one group is still new to another.
func Dedup(key, group string) string {
	if group == "" {
		return Derived(key, "dedup")
	}
	return Derived(key, "dedup:"+group)
}
