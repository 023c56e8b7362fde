package inbox

import "time"

// idleState is what Fetch knows of an idle queue: when its last claim found nothing, the
// wake channel its group had before that claim (closed since: a row may have come due),
// and when the earliest row waiting for its retry_after comes due (zero: none, or not
// known). The zero idleState claims at once.
type idleState struct {
	due   time.Time
	since time.Time
	wake  <-chan struct{}
}

// over reports whether the queue should claim again: it has not found itself idle, or
// it was woken, or its poll interval has passed, or a waiting row has come due.
func (s idleState) over(poll time.Duration) bool {
	if s.since.IsZero() {
		return true
	}
	select {
	case <-s.wake:
		return true
	default:
	}
	return time.Until(s.until(poll)) <= 0
}

// until returns when the idle queue claims again unless woken first.
func (s idleState) until(poll time.Duration) time.Time {
	next := s.since.Add(poll)
	if !s.due.IsZero() && s.due.Before(next) {
		return s.due
	}
	return next
}
