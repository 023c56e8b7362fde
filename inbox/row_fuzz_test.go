package inbox

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
)

// FuzzClaimedRowDelivery feeds arbitrary column values (SQLite is dynamically typed: a
// user's table may hold any type in any column, and a driver returns each as the Go type
// it stored: int64, float64, string, []byte or nil) through the real scan of a claim
// (queryClaimed, over the echo driver of helpers_test.go, which returns a query's bound
// values as its one row, as a driver returns stored column values) and the row's
// delivery. It never panics; a row either fails to scan with an error, or
// becomes a delivery whose attempt is at least 1, whose retry count is 0 (a table has
// no retry-count header), whose id reads as the id column and whose payload is the
// payload column byte for byte, owned by the delivery.
func FuzzClaimedRowDelivery(f *testing.F) {
	f.Add(uint8(0), int64(1), "", uint8(0), int64(1), "", []byte("payload"), false)
	f.Add(uint8(1), int64(0), "order-42", uint8(1), int64(0), "", []byte{}, false)
	f.Add(uint8(2), int64(0), "\x00\xff", uint8(2), int64(0), "", []byte{0x00, 0xc1}, true)
	f.Add(uint8(0), int64(-9), "", uint8(3), int64(0), "7", []byte("x"), false)
	f.Add(uint8(0), int64(9), "", uint8(3), int64(0), "seven", []byte("x"), false)
	f.Add(uint8(0), int64(9), "", uint8(0), int64(-3), "", []byte(nil), true)
	f.Add(uint8(3), int64(0), "", uint8(4), int64(0), "2.5", []byte("x"), false)

	db := openEcho(f)

	f.Fuzz(func(t *testing.T, idKind uint8, idInt int64, idText string, attemptKind uint8, attemptInt int64, attemptText string, payload []byte, nullPayload bool) {
		id := columnValue(idKind, idInt, idText)
		attempt := columnValue(attemptKind, attemptInt, attemptText)
		bound := bytes.Clone(payload)
		var p any = bound
		if nullPayload {
			p = nil
		}
		rows, err := queryClaimed(context.Background(), db, "SELECT ?, ?, ?, ?, ?", []any{id, attempt, p, "lease", nil})
		if err != nil {
			// No column value may fail the claim: a garbled attempt reads as 1 rather than
			// stalling its whole batch.
			t.Fatalf("scan of id %#v, attempt %#v failed: %v", id, attempt, err)
		}
		if len(rows) != 1 {
			t.Fatalf("got %d rows, want 1", len(rows))
		}
		d, err := rows[0].delivery("jobs")
		if err != nil {
			t.Fatalf("a row without headers: %v", err)
		}
		if d.Attempt < 1 || d.RetryCount != 0 {
			t.Fatalf("attempt %#v read as Attempt %d, RetryCount %d", attempt, d.Attempt, d.RetryCount)
		}
		if n, isInt := attempt.(int64); isInt && n >= 1 && int64(d.Attempt) != n {
			t.Fatalf("attempt %d read as %d", n, d.Attempt)
		}
		if !d.HasPayload || d.Key != "jobs" || d.Headers == nil || d.Raw == nil {
			t.Fatalf("delivery %+v lacks its payload flag, key, headers or row", d)
		}
		if want := wantID(id); d.ID != want {
			t.Fatalf("id %#v read as %q, want %q", id, d.ID, want)
		}
		if nullPayload {
			if d.Payload != nil {
				t.Fatalf("NULL payload read as %q, want nil", d.Payload)
			}
			return
		}
		if !bytes.Equal(d.Payload, payload) {
			t.Fatalf("payload %q read as %q", payload, d.Payload)
		}
		if len(d.Payload) > 0 {
			// The delivery owns its payload: the caller's bytes are not aliased.
			bound[0] ^= 0xff
			if d.Payload[0] == bound[0] {
				t.Fatalf("the delivery's payload aliases the bound value")
			}
		}
	})
}

// columnValue returns a column value of one of the types a SQLite column can hold.
func columnValue(kind uint8, n int64, s string) any {
	switch kind % 5 {
	case 0:
		return n
	case 1:
		return s
	case 2:
		return []byte(s)
	case 3:
		return nil
	default:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return float64(n) + 0.5
		}
		return f
	}
}

// wantID is how a scanned id column reads as a delivery id.
func wantID(id any) string {
	switch id := id.(type) {
	case []byte:
		return string(id)
	case nil:
		return "<nil>"
	}
	return fmt.Sprint(id)
}
