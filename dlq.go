package settle

import (
	"errors"
	"time"
	"unicode/utf8"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// Headers a dead letter carries besides the message's own headers, whose retry count is
// set to the attempts spent.
const (
	// HeaderDeadAt is when the message was dead-lettered, on the App's clock: RFC 3339
	// in UTC with milliseconds ("2006-01-02T15:04:05.000Z"). A list or channel dead
	// letter has no entry id to tell the time by; a stream dead letter carries it too.
	HeaderDeadAt = HeaderPrefix + "dead-at"
	// HeaderDeadError is the last error the handler returned (for a panic, the panic
	// value and its stack), cut at 4 KiB.
	HeaderDeadError = HeaderPrefix + "dead-error"
	// HeaderDeadID is the id of the delivery that was dead-lettered (a stream entry id).
	HeaderDeadID = HeaderPrefix + "dead-id"
	// HeaderDeadReason says why the message was dead-lettered.
	HeaderDeadReason = HeaderPrefix + "dead-reason"
	// HeaderDeadSource is the key (stream, list, channel) the message was read from.
	HeaderDeadSource = HeaderPrefix + "dead-source"
	// HeaderDeadFields is, on a dead letter by reference (a stream entry with more
	// fields than settle's scripts can write back), every field of the entry as one
	// JSON object: the fields outlive the entry, which its stream's trim may remove.
	HeaderDeadFields = HeaderPrefix + "dead-fields"
)

// deadAtLayout is the time layout of HeaderDeadAt (time.RFC3339 parses it).
const deadAtLayout = wire.DeadAtLayout

// deadLetterHeaders returns the headers of d's dead letter: d's own headers as they
// arrived, retry count set to the attempts spent, and the dead-letter headers; now is
// the App's clock at the dead letter.
func deadLetterHeaders(d *source.Delivery, s settlement, lastErr error, now time.Time) map[string]string {
	h := withRetryCount(d.Headers, d.Attempt)
	h[HeaderDeadAt] = now.UTC().Format(deadAtLayout)
	h[HeaderDeadSource] = d.Key
	h[HeaderDeadID] = d.ID
	h[HeaderDeadReason] = s.Reason
	h[HeaderDeadError] = errorText(lastErr)
	return h
}

// errorText is the text of a handler's error as a dead letter or a last-error column
// keeps it: for a panic, the panic value and its stack; cut at 4 KiB ("" for nil).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var pe *PanicError
	if errors.As(err, &pe) {
		msg += "\n" + string(pe.Stack)
	}
	return truncate(msg, maxErrorHeader)
}

// maxErrorHeader bounds the last-error header so a huge error (a panic stack, say) does
// not make an oversized dead letter.
const maxErrorHeader = 4096

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // cut before a rune, not inside it
	}
	return s[:n] + "…(truncated)"
}
