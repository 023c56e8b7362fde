package console

import (
	"errors"
	"fmt"
)

var (
	// errCSRF refuses a POST without the CSRF token of its cookie.
	errCSRF = errors.New("this form has no valid CSRF token: reload the page and try again")
	// errReadOnly refuses every POST of a read-only console.
	errReadOnly = errors.New("this console is read-only: it takes no actions")
)

// errNotFound names what a path names and the console does not have.
func errNotFound(what, name string) error {
	return fmt.Errorf("the console has no %s %q", what, name)
}
