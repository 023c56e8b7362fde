package settle

import (
	"context"
	"fmt"
	"strings"
)

// Seek moves the consumer group's position back (or forward) to id (XGROUP SETID): the
// entries after id are delivered again, to whichever consumers of the group read next,
// as new deliveries. "0" replays the whole stream; "$" skips to its end. A group that
// does not exist yet is created at id.
//
// A replayed entry's attempt comes from its retry-count header, which Seek does not
// change: an entry that was a retry copy is delivered with the attempt it had. Entries
// still pending when Seek is called are handed to the consumer that reads them next;
// one still in flight at a consumer of this process is not handled twice.
//
// Seek may be called at any time, while an App runs the source or not.
func (s *StreamSource) Seek(ctx context.Context, id string) error {
	err := s.rdb.XGroupSetID(ctx, s.key, s.group, id).Err()
	if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		err = s.rdb.XGroupCreateMkStream(ctx, s.key, s.group, id).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
			// Created meanwhile by a consumer starting: move it.
			err = s.rdb.XGroupSetID(ctx, s.key, s.group, id).Err()
		}
	}
	if err != nil {
		return fmt.Errorf("settle: stream %q: seek group %q to %q: %w", s.key, s.group, id, err)
	}
	return nil
}

// Seek moves the consumer group's position back (or forward) to id (XGROUP SETID), like
// StreamSource.Seek: the entries after id are delivered again as new deliveries.
//
// Redis counts a replayed entry's deliveries from 1 again, so its attempt restarts: it is
// the retry-count header (unchanged by Seek) plus 1, and the MaxAttempts cap counts from
// the replay. An entry left pending by a Retry is delivered at once, without waiting out
// minIdle.
func (s *ClaimingStreamSource) Seek(ctx context.Context, id string) error {
	return s.stream.Seek(ctx, id)
}
