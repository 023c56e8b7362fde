package inbox

import (
	"fmt"
	"strings"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/publish"
)

// publishConfig applies the options of a publish call and returns their refusal: an
// option an inbox does not take, or headers for a table without a headers column or
// with a name the Redis publishers refuse too.
func (ib *Inbox) publishConfig(opts []settle.PublishOption) (publish.Config, error) {
	var c publish.Config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := c.Refuse("an inbox", "Header"); err != nil {
		return c, fmt.Errorf("inbox: publish to %s: %w", ib.table.Name, err)
	}
	if len(c.Headers) > 0 && ib.table.Headers == "" {
		return c, fmt.Errorf("inbox: publish to %s: headers given, but the table spec names no Headers column to hold them", ib.table.Name)
	}
	for k := range c.Headers {
		if k == "" || strings.HasPrefix(k, settle.HeaderPrefix) {
			return c, fmt.Errorf("inbox: publish to %s: header %q: the empty name and the reserved prefix %q are refused", ib.table.Name, k, settle.HeaderPrefix)
		}
	}
	return c, nil
}
