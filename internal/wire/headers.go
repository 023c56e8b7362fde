package wire

import (
	"errors"
	"strconv"
	"strings"
)

// The headers settle writes, as the transports write and read them. settle declares the
// public names (settle.HeaderRetryCount, settle.HeaderDeadAt, …) with the same values;
// a test keeps the two in step.
const (
	HeaderPrefix          = "settle-"
	HeaderRetryCount      = HeaderPrefix + "retry-count"
	HeaderInvalidEnvelope = HeaderPrefix + "invalid-envelope"
	HeaderDeadAt          = HeaderPrefix + "dead-at"
	HeaderDeadError       = HeaderPrefix + "dead-error"
	HeaderDeadID          = HeaderPrefix + "dead-id"
	HeaderDeadReason      = HeaderPrefix + "dead-reason"
	HeaderDeadSource      = HeaderPrefix + "dead-source"
	HeaderDeadFields      = HeaderPrefix + "dead-fields"
	HeaderOriginID        = HeaderPrefix + "origin-id"
)

// DeadAtLayout is the time layout of HeaderDeadAt (time.RFC3339 parses it).
const DeadAtLayout = "2006-01-02T15:04:05.000Z07:00"

// MaxRetryCount bounds the retry-count header as it is read (settle.MaxRetryCount).
const MaxRetryCount = 1 << 20

// MaxReadFields is the most fields a stream entry read may have for settle to settle it
// by its scripts: what they write less the fields settle adds to a copy or dead letter.
const MaxReadFields = MaxStreamFields - 16

// ParseRetryCount reads the retry-count header. A missing header is 0; a garbled one
// (not an integer, or negative) is also 0, and one beyond MaxRetryCount is
// MaxRetryCount; for both ok is false so the caller can log it.
func ParseRetryCount(headers map[string]string) (n int, ok bool) {
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

// WithRetryCount returns a copy of headers whose retry count is n.
func WithRetryCount(headers map[string]string, n int) map[string]string {
	out := make(map[string]string, len(headers)+2) // room for the origin id too
	for k, v := range headers {
		out[k] = v
	}
	out[HeaderRetryCount] = strconv.Itoa(n)
	return out
}
