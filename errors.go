package settle

import (
	"github.com/settlekit/settle/internal/redisbase"

	"errors"
	"fmt"
)

// ErrAppClosed is returned by Run when the App has already run.
var ErrAppClosed = errors.New("settle: app closed")

// ErrDrainTimeout is the cause of a handler's context cancelled because a graceful
// shutdown's drain timeout passed before the handler returned: a handler can tell it
// from other cancellations with errors.Is(context.Cause(ctx), settle.ErrDrainTimeout).
var ErrDrainTimeout = errors.New("settle: shutdown: drain timeout passed")

// ErrHandlerTimeout is the cause of a handler's context cancelled because the mount's
// Timeout passed before the handler returned. The delivery is settled as a failure at
// that moment, whatever the handler returns later.
var ErrHandlerTimeout = errors.New("settle: handler timeout passed")

// PanicError is the error a handler's panic becomes: the delivery is retried, and the
// panic value and stack are kept for logs and the dead letter.
type PanicError struct {
	// Stack is the goroutine's stack at the panic.
	Stack []byte
	// Value is what the handler panicked with.
	Value any
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("settle: handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// DecodeError is the error a payload that does not decode becomes. It counts as a
// failure (Retry) and spends an attempt like any other, so a payload that can never
// decode reaches the dead letter at the cap.
type DecodeError struct {
	// Codec names the codec that failed.
	Codec string
	// Err is the codec's error.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("settle: decode payload (%s): %v", e.Codec, e.Err)
}

// Unwrap returns the codec's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// ConfigError is one refusal found by App.Validate: the mount it concerns and what is
// wrong. Validate joins every refusal with errors.Join.
type ConfigError struct {
	// Mount names the mount; empty for an App-wide setting.
	Mount string
	// Problem says what is wrong and how to fix it.
	Problem string
}

// Error implements error.
func (e *ConfigError) Error() string {
	if e.Mount == "" {
		return "settle: " + e.Problem
	}
	return fmt.Sprintf("settle: mount %s: %s", e.Mount, e.Problem)
}

// errNoPayload is the decode failure of a message that arrived without a payload (a
// stream entry written by another client with no payload field).
var errNoPayload = errors.New("message has no payload field (entry written by another client?)")

// ErrPermission is the error of a mount whose Redis user may not run every command the
// mount needs (checked when Run opens it): the message names each one refused.
var ErrPermission = errors.New("settle: missing Redis permissions")

// The Redis transports' ACL preflight wraps settle's sentinel.
func init() { redisbase.ErrPermission = ErrPermission }
