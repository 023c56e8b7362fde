package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDlqExportThenImportRoundTripsHostileBytesExactly is rule 5 of issue 23: header
// names and values and payloads that are not UTF-8 (or that look like the base64
// marker) come back byte for byte.
func TestDlqExportThenImportRoundTripsHostileBytesExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entries := [][]any{
		{"payload", "\x00\xff\xfe binary \x80", "h", "\n\xff\xfe\x80\x01", "name\xff\xfe", "v", "city", "caf\xe9"},
		{"payload", "plain", "looks", "base64:aGk=", "base64:x", "marker as a name", "emoji", "caf\u00e9 \U0001F600"},
		{"only", "headers, no payload field"},
	}
	for _, vals := range entries {
		if err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: b.dlq, Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	exp := b.ok(t, nil, "dlq", "export", b.dlq).stdout
	if !strings.Contains(exp, `"base64:`) {
		t.Fatalf("the export carries no base64 marker:\n%s", exp)
	}
	to := b.key("copy.dlq")
	b.ok(t, strings.NewReader(exp), "dlq", "import", to, "--yes")
	orig, _ := b.rdb.XRange(b.ctx, b.dlq, "-", "+").Result()
	copied, _ := b.rdb.XRange(b.ctx, to, "-", "+").Result()
	if len(copied) != len(orig) {
		t.Fatalf("imported %d entries, want %d", len(copied), len(orig))
	}
	for n := range orig {
		if fmt.Sprintf("%q", orig[n].Values) != fmt.Sprintf("%q", copied[n].Values) {
			t.Errorf("entry %d: imported %q, want %q", n, copied[n].Values, orig[n].Values)
		}
	}
}

// TestDlqImportRefusesAnEntryNoReplayCouldMoveNamingTheLine: too many headers, a
// header named payload (with or without a payload) are refused before anything is
// written, naming the line.
func TestDlqImportRefusesAnEntryNoReplayCouldMoveNamingTheLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var many strings.Builder
	many.WriteString(`{"headers":{`)
	for k := 0; k < 3000; k++ {
		if k > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"h%d":"v"`, k)
	}
	many.WriteString(`},"payload":"aGk="}`)
	ok := `{"headers":{"a":"b"},"payload":"aGk="}`
	for name, tc := range map[string]struct{ line, says string }{
		"too many headers":      {many.String(), "3000 headers"},
		"payload header":        {`{"headers":{"payload":"x","a":"b"},"payload":"aGk="}`, `header named "payload"`},
		"only a payload header": {`{"headers":{"payload":"x"},"payload":null}`, `header named "payload"`},
		"bad marker":            {`{"headers":{"a":"base64:!!"},"payload":"aGk="}`, "not base64"},
	} {
		t.Run(name, func(t *testing.T) {
			to := b.key("refused-" + strings.ReplaceAll(name, " ", "-"))
			r := b.settle(t, strings.NewReader(ok+"\n"+tc.line+"\n"), "dlq", "import", to, "--yes")
			if r.code != exitError || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, tc.says) || !strings.Contains(r.stderr, "nothing was written") {
				t.Errorf("exit %d, stderr %q; want 1 naming line 2 and %q", r.code, r.stderr, tc.says)
			}
			if n, _ := b.rdb.Exists(b.ctx, to).Result(); n != 0 {
				t.Errorf("%s was written", to)
			}
		})
	}
}
