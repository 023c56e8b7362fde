package redisbase

import (
	"context"
	"log/slog"
	"sync"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// EnvelopeReader turns list items and channel messages into deliveries' payload and
// headers, logging a garbled retry count once.
type EnvelopeReader struct {
	garbledOnce sync.Once
	invalidOnce sync.Once
	Logger      *slog.Logger
	Mount       string
}

// Read decodes value: an envelope gives its payload and headers; a value that is not an
// envelope is a bare payload with no headers; an invalid envelope is delivered whole
// with no decodable payload and wire.HeaderInvalidEnvelope saying why.
func (r *EnvelopeReader) Read(ctx context.Context, key string, value []byte) (payload []byte, headers map[string]string, hasPayload bool, retryCount int) {
	payload, headers, _, err := wire.FromEnvelope(value)
	hasPayload = true
	switch {
	case err != nil:
		payload = value
		headers = map[string]string{wire.HeaderInvalidEnvelope: err.Error()}
		hasPayload = false
		r.invalidOnce.Do(func() {
			r.Logger.WarnContext(ctx, "settle: a value starts like a settle envelope but does not decode; delivering it undecodable (logged once per mount)",
				slog.String(source.AttrMount, r.Mount), slog.String(source.AttrKey, key), slog.Any(source.AttrError, err))
		})
	case headers == nil:
		headers = map[string]string{}
	}
	if _, marked := headers[wire.HeaderInvalidEnvelope]; marked {
		hasPayload = false
	}
	rc, ok := wire.ParseRetryCount(headers)
	if !ok {
		r.garbledOnce.Do(func() {
			r.Logger.WarnContext(ctx, "settle: garbled or out-of-range retry-count header read as 0 or wire.MaxRetryCount (logged once per mount)",
				slog.String(source.AttrMount, r.Mount), slog.String(source.AttrKey, key), slog.String(wire.HeaderRetryCount, headers[wire.HeaderRetryCount]), slog.Int("read_as", rc))
		})
	}
	return payload, headers, hasPayload, rc
}
