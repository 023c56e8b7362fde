package settletest

import (
	"runtime/debug"
	"testing"

	"github.com/settlekit/settle"
)

// Handle runs h once on m, with no App, no transport and no clock, and returns the
// outcome the engine would settle it by: what a unit test of a handler asserts. A panic
// is recovered as the engine recovers it (Retry with a *settle.PanicError). A Message
// built by the test decodes with msgpack (settle.Msgpack.Marshal its payload); its
// Attempt is 1 when left at 0.
func Handle(t testing.TB, h settle.Handler, m *settle.Message) (o settle.Outcome) {
	t.Helper()
	if m.Attempt == 0 {
		m.Attempt = 1
	}
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	defer func() {
		if r := recover(); r != nil {
			o = settle.OutcomeOf(&settle.PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	return settle.OutcomeOf(h.Handle(t.Context(), m))
}
