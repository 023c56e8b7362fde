package settle

import "github.com/redis/go-redis/v9"

// rereadFence keeps a re-read of a consumer's own pending entries from handing out an
// entry a second time after its settlement succeeded.
//
// The re-read and a settlement travel on different connections: Redis may run the read
// before the settlement's XACK (or script) and the reply may reach the consumer after the
// settlement's, once the entry is no longer in flight here. Such an entry was settled;
// delivering it again would run its handler twice. The fence remembers the entries whose
// settlement succeeded while a re-read was out, and the re-read drops them. A
// settlement that completed before the read was sent needs no fence: Redis ran it
// before the read, which cannot return the entry.
//
// The transport's mutex guards it; one re-read is out at a time (the fetch loop is
// serial).
type rereadFence struct {
	reading bool
	settled map[string]struct{}
}

// begin marks a re-read sent.
func (f *rereadFence) begin() {
	f.reading = true
	clear(f.settled)
}

// note records entries whose settlement succeeded; only a re-read out needs them.
func (f *rereadFence) note(id string) {
	if !f.reading {
		return
	}
	if f.settled == nil {
		f.settled = map[string]struct{}{}
	}
	f.settled[id] = struct{}{}
}

// end marks the re-read's reply received and returns its entries less those settled
// meanwhile.
func (f *rereadFence) end(msgs []redis.XMessage) []redis.XMessage {
	f.reading = false
	if len(f.settled) == 0 {
		return msgs
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		if _, done := f.settled[m.ID]; !done {
			kept = append(kept, m)
		}
	}
	clear(f.settled)
	return kept
}
