package source

import (
	"errors"
	"fmt"
)

// AckErrors is the error of a Transport.Ack call that failed for some of its deliveries
// only: Errs lines up with the deliveries given to Ack, and a nil entry means that
// delivery's ack applied. A transport returns it when one call settles a batch whose
// deliveries can fail one by one (a reliable list's ack of an item another consumer
// already recovered).
type AckErrors struct {
	Errs []error
}

// Error summarises the failed acks.
func (e *AckErrors) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("%d of %d acks failed; first: %v", n, len(e.Errs), first)
}

// AckError returns the error of the i-th delivery of an Ack call that returned err:
// its own entry of an *AckErrors, else err itself (the whole call failed or applied).
func AckError(err error, i int) error {
	if err == nil {
		return nil // the common case, kept free of errors.As's allocation
	}
	var each *AckErrors
	if errors.As(err, &each) {
		if i < len(each.Errs) {
			return each.Errs[i]
		}
	}
	return err // the whole call failed (or a transport gave too few entries)
}
