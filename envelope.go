package settle

import (
	"context"
	"log/slog"
	"sync"

	"github.com/settlekit/settle/internal/wire"
)

// HeaderInvalidEnvelope marks a list item or channel message that started like settle's
// envelope but did not decode: its value is the decode error. Such a message is
// delivered with its whole value, as it arrived, as Message.Payload, but Message.Decode
// (and so Typed) refuses it with a *DecodeError: it spends attempts like any payload that
// does not decode and reaches the dead letter at the cap with its bytes intact. Its
// retry copies carry this header, so every delivery of it reads the same.
const HeaderInvalidEnvelope = HeaderPrefix + "invalid-envelope"

// envelopeReader turns list items and channel messages into deliveries' payload and
// headers, logging a garbled retry count once.
type envelopeReader struct {
	garbledOnce sync.Once
	invalidOnce sync.Once
	logger      *slog.Logger
	mount       string
}

// read decodes value: an envelope gives its payload and headers; a value that is not an
// envelope is a bare payload with no headers; an invalid envelope is delivered whole
// with no decodable payload and HeaderInvalidEnvelope saying why.
func (r *envelopeReader) read(ctx context.Context, key string, value []byte) (payload []byte, headers map[string]string, hasPayload bool, retryCount int) {
	payload, headers, _, err := wire.FromEnvelope(value)
	hasPayload = true
	switch {
	case err != nil:
		payload = value
		headers = map[string]string{HeaderInvalidEnvelope: err.Error()}
		hasPayload = false
		r.invalidOnce.Do(func() {
			r.logger.WarnContext(ctx, "settle: a value starts like a settle envelope but does not decode; delivering it undecodable (logged once per mount)",
				slog.String(attrMount, r.mount), slog.String(attrKey, key), slog.Any(attrError, err))
		})
	case headers == nil:
		headers = map[string]string{}
	}
	if _, marked := headers[HeaderInvalidEnvelope]; marked {
		hasPayload = false
	}
	rc, ok := parseRetryCount(headers)
	if !ok {
		r.garbledOnce.Do(func() {
			r.logger.WarnContext(ctx, "settle: garbled or out-of-range retry-count header read as 0 or MaxRetryCount (logged once per mount)",
				slog.String(attrMount, r.mount), slog.String(attrKey, key), slog.String(HeaderRetryCount, headers[HeaderRetryCount]), slog.Int("read_as", rc))
		})
	}
	return payload, headers, hasPayload, rc
}
