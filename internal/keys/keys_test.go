package keys

import (
	"strings"
	"testing"
)

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

// TestSameSlotNamesOnlyTheKeysOutsideTheFirstsSlotWithAValidKeyToUse: the refusal names
// the keys outside the first key's slot and not those inside it, each once, and
// suggests names that are valid keys in the first key's slot (not "{{orders}}:dlq").
func TestSameSlotNamesOnlyTheKeysOutsideTheFirstsSlotWithAValidKeyToUse(t *testing.T) {
	t.Parallel()
	err := SameSlot("{orders}:in", "{orders}:delayed", "orders:dlq", "orders:dlq", "{x}:replies")
	if err == nil {
		t.Fatal("keys outside the first's slot: got nil, want an error")
	}
	msg := err.Error()
	if strings.Contains(msg, "{orders}:delayed") || strings.Count(msg, `"orders:dlq"`) != 1 || !strings.Contains(msg, `"{x}:replies"`) {
		t.Fatalf("SameSlot = %q; want orders:dlq (once) and {x}:replies named, not {orders}:delayed", msg)
	}
	for _, want := range []string{`"{orders}:dlq"`, `"{orders}:x:replies"`} {
		if !strings.Contains(msg, want) {
			t.Fatalf("SameSlot = %q; want it to suggest %s", msg, want)
		}
	}
	if strings.Contains(msg, "{{") {
		t.Fatalf("SameSlot = %q suggests nested braces", msg)
	}
	for _, k := range []string{"{orders}:dlq", "{orders}:x:replies"} {
		if Slot(k) != Slot("{orders}:in") {
			t.Fatalf("suggested %q is in slot %d, not the stream's", k, Slot(k))
		}
	}
	// Untagged: the whole key is the tag.
	if err := SameSlot("orders", "orders.dlq"); err == nil || !strings.Contains(err.Error(), `"{orders}.dlq"`) || Slot("{orders}.dlq") != Slot("orders") {
		t.Fatalf("SameSlot(orders, orders.dlq) = %v; want it to suggest {orders}.dlq", err)
	}
}
