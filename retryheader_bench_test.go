package settle

import "testing"

// The retry-count header is read on every delivery and written on every retry copy.

func BenchmarkParseRetryCount(b *testing.B) {
	headers := map[string]string{HeaderRetryCount: "2", "trace": "abc"}
	b.ReportAllocs()
	for b.Loop() {
		if n, ok := parseRetryCount(headers); n != 2 || !ok {
			b.Fatalf("parseRetryCount = %d, %v", n, ok)
		}
	}
}

func BenchmarkWithRetryCount(b *testing.B) {
	headers := map[string]string{HeaderRetryCount: "2", "trace": "abc"}
	b.ReportAllocs()
	for b.Loop() {
		if out := withRetryCount(headers, 3); len(out) != 2 {
			b.Fatalf("withRetryCount = %v", out)
		}
	}
}
