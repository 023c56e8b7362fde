package keys

import "testing"

func TestDerivedSharesTheSourceSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		want string
	}{
		{name: "Tagged", key: "{jobs}:in", want: "{jobs}:in:processing:c1"},
		{name: "Untagged", key: "jobs", want: "{jobs}:processing:c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ListProcessing(tt.key, "c1")
			if got != tt.want {
				t.Fatalf("ListProcessing(%q) = %q, want %q", tt.key, got, tt.want)
			}
			for _, k := range []string{got, ListHeartbeat(tt.key, "c1"), ListConsumers(tt.key)} {
				if Slot(k) != Slot(tt.key) {
					t.Fatalf("Slot(%q) = %d, want the slot of %q (%d)", k, Slot(k), tt.key, Slot(tt.key))
				}
			}
		})
	}
}
