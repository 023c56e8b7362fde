package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/settlekit/settle/admin"
)

// KindPartitionedStream is the overview's kind of a PartitionedStream.
const KindPartitionedStream = "partitioned-stream"

// PartitionedStream is one partitioned stream's consumer group (settle.PartitionedStream):
// its page shows each partition's owner, lease time left, fencing token, length, lag,
// pending entries and dead letters, then the group's live members and how many
// partitions each holds, read by admin.Inspector.PartitionedStream (pipelined, one
// round a page whatever the number of partitions).
type PartitionedStream struct {
	// DeadLetter is the mount's dead-letter name as given to settle.DeadLetter: each
	// partition's dead letters are counted in its own copy of it ("": none counted).
	DeadLetter string
	// Group is the consumer group whose leases and backlog are shown (required).
	Group string
	// Key is the partitioned stream's name as given to settle.PartitionedStream: its
	// meta key (required).
	Key string
	// Name names it in the console (defaults to Key); names are unique among the
	// partitioned streams.
	Name string
}

// partitionedPage is a partitioned stream's page: its partitions and members, and what
// they add up to.
type partitionedPage struct {
	// Info is what admin read.
	Info *admin.PartitionedStreamInfo
	// Row is the figures the overview shows, added up over the partitions.
	Row row
	// Stream is the partitioned stream as configured.
	Stream PartitionedStream
}

// partitionedPage serves a partitioned stream's page.
func (c *Console) partitionedPage(w http.ResponseWriter, r *http.Request) {
	ps, ok := c.partitionedStream(r.PathValue("name"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such partitioned stream", errNotFound("partitioned stream", r.PathValue("name")))
		return
	}
	info, paused, err := c.readPartitioned(r.Context(), ps)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, "Cannot read partitioned stream "+ps.Name, err)
		return
	}
	rw := c.partitionedRowOf(ps, info, paused)
	c.render(w, r, http.StatusOK, "partitioned", page{
		Title: ps.Name, Data: partitionedPage{Info: info, Row: rw, Stream: ps},
		Crumbs: []crumb{{c.path(), "Overview"}, {rw.Href, ps.Name}},
	})
}

// partitionedRow reads the figures of the partitioned stream ps for the overview.
func (c *Console) partitionedRow(ctx context.Context, ps PartitionedStream) row {
	info, paused, err := c.readPartitioned(ctx, ps)
	if err != nil {
		return row{Name: ps.Name, Kind: KindPartitionedStream, Href: c.path("partitioned", ps.Name), Err: err.Error(), State: "unreadable",
			Dead: -1, Delayed: -1, EntriesAdded: -1, EntriesRead: -1, Lag: -1, Overdue: -1, Pending: -1, Problems: []string{"cannot be read"}}
	}
	return c.partitionedRowOf(ps, info, paused)
}

// readPartitioned reads the partitions and members of ps, and whether its group is
// paused (its control key, which its mounts check, exists).
func (c *Console) readPartitioned(ctx context.Context, ps PartitionedStream) (*admin.PartitionedStreamInfo, bool, error) {
	info, err := c.opts.Admin.PartitionedStream(ctx, ps.Key, ps.Group, admin.PartitionDeadLetter(ps.DeadLetter))
	if err != nil {
		return nil, false, err
	}
	paused, err := c.opts.Admin.Paused(ctx, ps.Key, ps.Group)
	return info, paused, err
}

// partitionedRowOf adds up the partitions of info into the overview's row of ps, and
// judges it: paused, no live member while entries wait, partitions no member holds.
func (c *Console) partitionedRowOf(ps PartitionedStream, info *admin.PartitionedStreamInfo, paused bool) row {
	rw := row{Name: ps.Name, Kind: KindPartitionedStream, Href: c.path("partitioned", ps.Name), Delayed: -1, EntriesAdded: -1, EntriesRead: -1, Overdue: -1}
	if ps.DeadLetter == "" {
		rw.Dead = -1
	}
	owned := 0
	for _, p := range info.Partitions {
		rw.Length += p.Length
		rw.Pending += p.Pending
		if ps.DeadLetter != "" {
			rw.Dead += p.DeadLetters
		}
		if rw.Lag >= 0 {
			rw.Lag += p.Lag
			if p.Lag < 0 {
				rw.Lag = -1 // one partition the server cannot say for: the sum is unknown
			}
		}
		if p.Owner != "" {
			owned++
		}
	}
	n := len(info.Partitions)
	switch {
	case len(info.Members) == 0:
		rw.State = "no live member"
		if rw.Lag != 0 || rw.Pending > 0 {
			rw.Problems = append(rw.Problems, "no member of the group is alive: nothing reads its partitions")
		}
	case owned < n:
		rw.State = fmt.Sprintf("running: %d %s, %d of %d partitions held", len(info.Members), plural(len(info.Members), "member", "members"), owned, n)
		rw.Problems = append(rw.Problems, fmt.Sprintf("%d of %d partitions held by no member (a lease ran out, or a member is taking them over)", n-owned, n))
	default:
		rw.State = fmt.Sprintf("running: %d %s, all %d partitions held", len(info.Members), plural(len(info.Members), "member", "members"), n)
	}
	if paused {
		rw.Paused, rw.State = "paused", "paused"
	}
	return rw
}

// partitionedStream returns the partitioned stream named name.
func (c *Console) partitionedStream(name string) (PartitionedStream, bool) {
	for _, ps := range c.partitioned {
		if ps.Name == name {
			return ps, true
		}
	}
	return PartitionedStream{}, false
}
