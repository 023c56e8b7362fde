package inbox

import (
	"context"
	"strconv"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/publish"
)

// InboxOption configures an Inbox (see New).
type InboxOption interface {
	applyInbox(ib *Inbox)
}

type inboxOptionFunc func(ib *Inbox)

func (f inboxOptionFunc) applyInbox(ib *Inbox) { f(ib) }

// WithPublishHook makes the Inbox call h before each publish (Publish, PublishTx,
// PublishMany and their Bytes forms), as settle.WithPublishHook does for a Redis
// Publisher, so that settleotel's PublishHook links a row's deliveries to its PRODUCER
// span: the headers h adds are written to the Table.Headers column with the caller's
// (a table without one keeps none, and nothing is linked), and h's completion gets the
// row's id (PublishMany: "", its rows sharing one publish), or the error, once the
// INSERT has run (in the caller's transaction: before it commits). h sees Kind "table"
// and Key the table's name. Defaults to no hook.
func WithPublishHook(h settle.PublishHook) InboxOption {
	return inboxOptionFunc(func(ib *Inbox) { ib.hook = h })
}

// publishing lets the Inbox's hook, if any, add its headers to c's for one publish of
// payloads, and returns the hook's completion (nil without a hook).
func (ib *Inbox) publishing(ctx context.Context, c *publish.Config, payloads [][]byte) func(id string, err error) {
	if ib.hook == nil {
		return nil
	}
	size := 0
	for _, p := range payloads {
		size += len(p)
	}
	headers := c.Headers
	if headers == nil {
		headers = make(map[string]string, 2)
	}
	done := ib.hook(ctx, &settle.Publishing{Headers: headers, Key: ib.table.Name, Kind: "table", Size: size})
	if ib.table.Headers != "" {
		c.Headers = headers // without a column, what the hook added has nowhere to go
	}
	return done
}

// published reports a publish's result to the hook's completion, if any, and returns
// ids and err.
func published(done func(id string, err error), ids []int64, err error) ([]int64, error) {
	if done != nil {
		id := ""
		if len(ids) == 1 {
			id = strconv.FormatInt(ids[0], 10)
		}
		done(id, err)
	}
	return ids, err
}
