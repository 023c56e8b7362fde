package inbox

import (
	"maps"
	"strings"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/source"
)

// movedHeaders returns the headers a row keeps through a settlement that leaves it in a
// table (a put-back, a park, a dead letter) whose move carries headers: its headers as
// claimed, with those under settle.HeaderHookPrefix replaced by the move's (a Move
// hook's trace link to this attempt, say). settle's other headers of the move (the
// retry count, the origin id, the dead letter's reason and error) are left out: the
// row's columns hold them (attempt, id, last error, dead-at). It reports false, and
// returns claimed, when neither the row nor the move has a hook header: the row's
// headers stay as they are.
func movedHeaders(claimed, move map[string]string) (map[string]string, bool) {
	if !hooked(claimed) && !hooked(move) {
		return claimed, false
	}
	out := make(map[string]string, len(claimed)+2)
	for k, v := range claimed {
		if !strings.HasPrefix(k, settle.HeaderHookPrefix) {
			out[k] = v
		}
	}
	for k, v := range move {
		if strings.HasPrefix(k, settle.HeaderHookPrefix) {
			out[k] = v
		}
	}
	return out, true
}

// hooked reports whether headers holds one a hook added (settle.HeaderHookPrefix).
func hooked(headers map[string]string) bool {
	for k := range headers {
		if strings.HasPrefix(k, settle.HeaderHookPrefix) {
			return true
		}
	}
	return false
}

// headersArg is the value of a move's :headers argument: the headers column's new
// value (see movedHeaders), or NULL to keep the column as it is (the statements write
// COALESCE(:headers, column)). A row that kept only hook headers, the move none, holds
// the empty object.
func headersArg(m source.Move) any {
	h, ok := m.Delivery.Raw.(*held)
	if !ok {
		return nil
	}
	out, changed := movedHeaders(h.headers, m.Headers)
	if !changed {
		return nil
	}
	if len(out) == 0 {
		return "{}"
	}
	return encodeHeaders(out)
}

// deadRowHeaders are the headers an OnDeadLetter hook is given: the row's, with the
// dead letter's hook headers (see movedHeaders), a copy the hook may keep.
func deadRowHeaders(claimed, move map[string]string) map[string]string {
	out, _ := movedHeaders(claimed, move)
	return maps.Clone(out)
}
