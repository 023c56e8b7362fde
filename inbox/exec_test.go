package inbox

import "testing"

func TestGarbledAttemptReadsAsOneInsteadOfFailingTheClaim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want int64
	}{
		{name: "Integer", v: int64(4), want: 4},
		{name: "IntegerText", v: []byte(" 7 "), want: 7},
		{name: "Null", v: nil, want: 1},
		{name: "Zero", v: int64(0), want: 1},
		{name: "Negative", v: int64(-3), want: 1},
		{name: "Words", v: "seven", want: 1},
		{name: "Blob", v: []byte{0xff, 0x00}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := attemptOf(tt.v); got != tt.want {
				t.Fatalf("attemptOf(%#v) = %d, want %d", tt.v, got, tt.want)
			}
		})
	}
}
