package settle

import (
	"maps"
	"testing"

	"github.com/settlekit/settle/internal/wire"
)

func TestParseRetryCount(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers map[string]string
		want    int
		wantOK  bool
	}{
		{name: "MissingIsZero", headers: map[string]string{"other": "7"}, want: 0, wantOK: true},
		{name: "NilHeadersIsZero", headers: nil, want: 0, wantOK: true},
		{name: "NumberIsRead", headers: map[string]string{HeaderRetryCount: "4"}, want: 4, wantOK: true},
		{name: "ZeroIsRead", headers: map[string]string{HeaderRetryCount: "0"}, want: 0, wantOK: true},
		{name: "SpacesAreTrimmed", headers: map[string]string{HeaderRetryCount: " 2 "}, want: 2, wantOK: true},
		{name: "GarbledIsZeroNotOK", headers: map[string]string{HeaderRetryCount: "two"}, want: 0, wantOK: false},
		{name: "EmptyIsZeroNotOK", headers: map[string]string{HeaderRetryCount: ""}, want: 0, wantOK: false},
		{name: "NegativeIsZeroNotOK", headers: map[string]string{HeaderRetryCount: "-3"}, want: 0, wantOK: false},
		{name: "FractionIsZeroNotOK", headers: map[string]string{HeaderRetryCount: "1.5"}, want: 0, wantOK: false},
		{name: "BeyondIntIsTheBoundNotOK", headers: map[string]string{HeaderRetryCount: "99999999999999999999999"}, want: MaxRetryCount, wantOK: false},
		{name: "MaxInt64IsTheBoundNotOK", headers: map[string]string{HeaderRetryCount: "9223372036854775807"}, want: MaxRetryCount, wantOK: false},
		{name: "BeyondTheBoundIsTheBoundNotOK", headers: map[string]string{HeaderRetryCount: "1048577"}, want: MaxRetryCount, wantOK: false},
		{name: "TheBoundIsRead", headers: map[string]string{HeaderRetryCount: "1048576"}, want: MaxRetryCount, wantOK: true},
		{name: "BelowIntIsZeroNotOK", headers: map[string]string{HeaderRetryCount: "-99999999999999999999999"}, want: 0, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseRetryCount(tt.headers)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("got (%d, %t), want (%d, %t)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestWithRetryCountCopiesHeaders(t *testing.T) {
	t.Parallel()

	orig := map[string]string{"trace": "abc", HeaderRetryCount: "1"}
	snapshot := maps.Clone(orig)
	got := withRetryCount(orig, 2)
	if !maps.Equal(orig, snapshot) {
		t.Fatalf("the original headers changed: got %v, want %v", orig, snapshot)
	}
	want := map[string]string{"trace": "abc", HeaderRetryCount: "2"}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if n, ok := parseRetryCount(got); n != 2 || !ok {
		t.Fatalf("parse of the incremented header: got (%d, %t), want (2, true)", n, ok)
	}
}

func TestWithRetryCountOfNilHeaders(t *testing.T) {
	t.Parallel()

	got := withRetryCount(nil, 1)
	if want := map[string]string{HeaderRetryCount: "1"}; !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestHeaderNamesMatchWire keeps settle's public header names and bounds in step with
// the ones the transports write (internal/wire).
func TestHeaderNamesMatchWire(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ public, internal string }{
		{HeaderPrefix, wire.HeaderPrefix},
		{HeaderRetryCount, wire.HeaderRetryCount},
		{HeaderInvalidEnvelope, wire.HeaderInvalidEnvelope},
		{HeaderDeadAt, wire.HeaderDeadAt},
		{HeaderDeadError, wire.HeaderDeadError},
		{HeaderDeadID, wire.HeaderDeadID},
		{HeaderDeadReason, wire.HeaderDeadReason},
		{HeaderDeadSource, wire.HeaderDeadSource},
		{HeaderDeadFields, wire.HeaderDeadFields},
		{HeaderOriginID, wire.HeaderOriginID},
		{deadAtLayout, wire.DeadAtLayout},
	} {
		if tt.public != tt.internal {
			t.Errorf("got %q, want %q", tt.public, tt.internal)
		}
	}
	if MaxHeaders != wire.MaxStreamFields-100 {
		t.Errorf("MaxHeaders = %d, want wire.MaxStreamFields - 100 = %d: room for the payload and settle's own headers", MaxHeaders, wire.MaxStreamFields-100)
	}
	if MaxRetryCount != wire.MaxRetryCount {
		t.Errorf("MaxRetryCount = %d, wire.MaxRetryCount = %d", MaxRetryCount, wire.MaxRetryCount)
	}
}
