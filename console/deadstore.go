package console

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/settlekit/settle/admin"
)

// deadLetters returns the dead letter of m: a stream for a stream kind, a list for a
// list kind, read and acted on through admin's one DeadLetterStore.
func (c *Console) deadLetters(m Mount) admin.DeadLetterStore {
	if m.isStream() {
		return c.opts.Admin.StreamDeadLetters(m.DeadLetter)
	}
	return c.opts.Admin.ListDeadLetterStore(m.DeadLetter)
}

// boundFields are the fields a confirmation sends back to fix its action to what the
// dry run showed: the count and the newest shown.
func boundFields(sel *admin.Selection) []header {
	if sel == nil {
		return nil
	}
	return []header{{"count", strconv.Itoa(sel.Count)}, {"through", sel.Filter.Through}}
}

// readBound reads the bound a confirmed form carries into sel (the dry run's count and
// newest shown); ids ticked are their own bound. A confirmed filter without one is
// refused: the action would act on what the filter selects now, not on what was
// confirmed.
func readBound(r *http.Request, sel *admin.Selection) error {
	if len(sel.Filter.IDs) > 0 && r.PostFormValue("count") == "" {
		sel.Count = len(sel.Filter.IDs)
		return nil
	}
	n, err := strconv.Atoi(r.PostFormValue("count"))
	if err != nil || n <= 0 {
		return fmt.Errorf("the confirmation names no count of what it confirmed (%q): go back and ask again", r.PostFormValue("count"))
	}
	sel.Count, sel.Filter.Through = n, r.PostFormValue("through")
	return nil
}
