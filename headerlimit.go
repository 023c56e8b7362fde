package settle

import (
	"errors"
	"fmt"

	"github.com/settlekit/settle/internal/wire"
)

// MaxHeaders is the most headers a message published to a stream may carry. A stream
// entry holds each header in a field of its own, and settle's Lua scripts write every
// retry copy, parked copy and dead letter with one XADD, to which Lua hands only so
// many values (about 8,000 on Redis, 5,100 on miniredis); the limit leaves room for the
// payload and settle's own headers. Lists and channels carry headers inside one value
// and have no such limit. A stream entry another client wrote with more fields than
// settle can write back is dead-lettered by reference (see Stream).
const MaxHeaders = wire.MaxStreamFields - 100

// maxReadFields is the most fields a stream entry read may have for settle to settle it
// by its scripts: what they write less the fields settle adds to a copy or dead letter.
const maxReadFields = wire.MaxStreamFields - 16

// ErrTooManyHeaders is the error of a stream publish with more than MaxHeaders headers:
// nothing was written.
var ErrTooManyHeaders = errors.New("settle: more headers than MaxHeaders")

// checkHeaderCount refuses more than MaxHeaders headers.
func checkHeaderCount(headers map[string]string) error {
	if len(headers) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d (each is a stream field, and settle's scripts write an entry's fields in one call)", ErrTooManyHeaders, len(headers), MaxHeaders)
	}
	return nil
}
