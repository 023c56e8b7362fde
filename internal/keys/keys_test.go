package keys

import "testing"

func TestSlotMatchesRedisClusterKeyslot(t *testing.T) {
	t.Parallel()
	// Values from the CLUSTER KEYSLOT documentation.
	tests := []struct {
		name string
		key  string
		want int
	}{
		{name: "Plain", key: "foo", want: 12182},
		{name: "Somekey", key: "somekey", want: 11058},
		{name: "HashTag", key: "foo{hash_tag}", want: 2515},
		{name: "SameTagSameSlot", key: "{hash_tag}", want: 2515},
		{name: "Empty", key: "", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Slot(tt.key); got != tt.want {
				t.Fatalf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}

func TestSameSlotRefusesKeysWithoutACommonTag(t *testing.T) {
	t.Parallel()
	if err := SameSlot("{refunds}:in", "{refunds}:dlq"); err != nil {
		t.Fatalf("tagged keys: got %v, want nil", err)
	}
	if err := SameSlot("refunds", "refunds.dlq"); err == nil {
		t.Fatal("untagged keys in different slots: got nil, want an error")
	}
}
