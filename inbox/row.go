package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// maxBatchRows bounds the rows one batched statement names.
const maxBatchRows = 200

// claimedRow is one row a claim leased.
type claimedRow struct {
	attempt int64
	headers any // the headers column as the driver returned it (nil: NULL or no column)
	id      any
	payload []byte
	token   any // the lease as stored: the fence of every later write
}

// delivery turns a claimed row of table into a delivery whose Raw is the row's *held. A
// table has no retry-count header: the attempt column counts every delivery of the row
// (one whose worker never settled it included), and the claim sets RetryCount (see
// transport.settledBefore). Headers that do not
// decode (see decodeHeaders) leave the delivery with none, and the error says why.
func (r claimedRow) delivery(table string) (*source.Delivery, error) {
	headers, err := decodeHeaders(r.headers)
	h := &held{headers: maps.Clone(headers), id: r.id, payload: r.payload, token: r.token}
	return &source.Delivery{
		Attempt:    int(r.attempt),
		HasPayload: true,
		Headers:    headers,
		ID:         idString(r.id),
		Key:        table,
		Payload:    r.payload,
		Raw:        h,
	}, err
}

// decodeHeaders reads a headers column: a JSON object of strings, as text or bytes
// (NULL and ” are no headers). It never returns nil; a value that is not such an
// object gives no headers and an error.
func decodeHeaders(v any) (map[string]string, error) {
	var b []byte
	switch v := v.(type) {
	case nil:
		return map[string]string{}, nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return map[string]string{}, fmt.Errorf("headers column holds %T, not JSON text", v)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return map[string]string{}, nil
	}
	headers := map[string]string{}
	if err := json.Unmarshal(b, &headers); err != nil {
		return map[string]string{}, fmt.Errorf("headers column is not a JSON object of strings: %w", err)
	}
	if headers == nil {
		headers = map[string]string{} // the JSON null
	}
	return headers, nil
}

// encodeHeaders is what a headers column holds for headers: a JSON object, or NULL for
// none.
func encodeHeaders(headers map[string]string) any {
	if len(headers) == 0 {
		return nil
	}
	b, _ := json.Marshal(headers) // a map of strings always encodes
	return string(b)
}

// held is a row leased to this worker, until settled.
type held struct {
	headers map[string]string // as the row was claimed (the delivery's own copy may change)
	id      any
	lot     *takeover // the takeover that took the row over (nil: the main claim's), set before the row is handed out
	payload []byte

	mu       sync.Mutex
	failedAt time.Time // when its settlement first failed, on the wall clock (see keepForRedo)
	settled  bool
	skew     time.Duration // the test clock's skew the lease was written at (see liveWorker.catchUp)
	token    any           // the lease as stored: the fence of every write
	wrote    time.Time     // when the lease was written, on the wall clock
}

// bindFences adds the fence of each row of hs, whose mu the caller holds, to vals: the
// :id<k> and :token<k> of a batched statement (see batched).
func bindFences(vals map[string]any, hs []*held) {
	for k, h := range hs {
		vals[fmt.Sprintf("id%d", k)] = h.id
		vals[fmt.Sprintf("token%d", k)] = h.token
	}
}

// idString is a row's id as text: a delivery's ID, and the row's key in maps.
func idString(id any) string {
	if b, ok := id.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(id)
}

// nextBatch splits hs into the rows one batched statement names, at most maxBatchRows
// and each id once (a row delivered twice, its lease lost and the row claimed again,
// waits for a later statement), and the rest.
func nextBatch(hs []*held) (batch, rest []*held) {
	seen := make(map[string]bool, min(len(hs), maxBatchRows))
	for _, h := range hs {
		id := idString(h.id)
		if seen[id] || len(batch) == maxBatchRows {
			rest = append(rest, h)
			continue
		}
		seen[id] = true
		batch = append(batch, h)
	}
	return batch, rest
}
