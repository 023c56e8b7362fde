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

func TestDedupSharesTheSourceSlotAndNamesTheGroup(t *testing.T) {
	for _, key := range []string{"{orders}:in", "orders"} {
		for _, group := range []string{"", "workers"} {
			set := Dedup(key, group)
			if err := SameSlot(key, set); err != nil {
				t.Fatalf("Dedup(%q, %q) = %q: %v", key, group, set, err)
			}
		}
	}
	if Dedup("{o}", "a") == Dedup("{o}", "b") {
		t.Fatal("two groups share one mark set")
	}
}
