package settle

import (
	"errors"
	"strconv"
	"strings"
)

// HeaderPrefix starts every header settle writes. Headers with this prefix are reserved:
// publishing one is refused.
const HeaderPrefix = "settle-"

// HeaderRetryCount is the retry-count header: how many deliveries of the message came
// before this copy. Every retry copy carries it one higher than the delivery it copies;
// a dead letter carries the attempts spent (the cap). A message published by settle has
// none, which reads as 0.
const HeaderRetryCount = HeaderPrefix + "retry-count"

// MaxRetryCount bounds the retry-count header as it is read: a larger count (written by
// another client, or too large for an int) reads as MaxRetryCount, so an attempt never
// overflows to a negative number and a delivery's attempt is always past any
// attempts cap up to MaxRetryCount, which then dead-letters it at its first failure.
const MaxRetryCount = 1 << 20

// parseRetryCount reads the retry-count header. A missing header is 0; a garbled one
// (not an integer, or negative) is also 0, and one beyond MaxRetryCount is
// MaxRetryCount; for both ok is false so the caller can log it.
func parseRetryCount(headers map[string]string) (n int, ok bool) {
	v, present := headers[HeaderRetryCount]
	if !present {
		return 0, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(strings.TrimSpace(v), "-"):
		return MaxRetryCount, false
	case err != nil || n < 0:
		return 0, false
	case n > MaxRetryCount:
		return MaxRetryCount, false
	}
	return n, true
}

// withRetryCount returns a copy of headers whose retry count is n.
func withRetryCount(headers map[string]string, n int) map[string]string {
	out := make(map[string]string, len(headers)+2) // room for the origin id too (see moveHeaders)
	for k, v := range headers {
		out[k] = v
	}
	out[HeaderRetryCount] = strconv.Itoa(n)
	return out
}
