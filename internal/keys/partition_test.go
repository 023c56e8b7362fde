package keys

import "testing"

// The hash is documented with these values so that a publisher in another language can
// check its own: a change here moves every key to another partition.
func TestPartitionForIsFNV1a32OfTheKeyModN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key  string
		hash uint32
		p16  int
	}{
		{"", 0x811c9dc5, 5},
		{"a", 0xe40c292c, 12},
		{"customer-1", 0x124fb217, 7},
		{"customer-42", 0xfe68adbe, 14},
	} {
		if got := PartitionHash(c.key); got != c.hash {
			t.Errorf("PartitionHash(%q) = %#x, want %#x", c.key, got, c.hash)
		}
		if got := PartitionFor(c.key, 16); got != c.p16 {
			t.Errorf("PartitionFor(%q, 16) = %d, want %d", c.key, got, c.p16)
		}
	}
}

func TestEachPartitionsKeysShareItsSlotAndPartitionsSpreadOverSlots(t *testing.T) {
	t.Parallel()
	slots := map[int]bool{}
	for i := range 16 {
		p := Partition("orders", i)
		if err := SameSlot(p, InPartition("orders", i, "dead"), InPartition("orders", i, "delayed"), PartitionLease("orders", i, "g")); err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
		slots[Slot(p)] = true
	}
	if len(slots) != 16 {
		t.Fatalf("16 partitions use %d slots, want 16", len(slots))
	}
	if got := Partition("orders", 3); got != "{orders:3}" {
		t.Fatalf("Partition(orders, 3) = %q, want {orders:3}", got)
	}
}

func TestCheckPartitionNameRefusesBracesAndEmpty(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"", "{orders}", "a}b"} {
		if CheckPartitionName(n) == nil {
			t.Errorf("CheckPartitionName(%q) = nil, want a refusal", n)
		}
	}
	if err := CheckPartitionName("orders"); err != nil {
		t.Fatal(err)
	}
}

// PartitionIndex reads back the index of every key Partition makes, and refuses keys of
// another shape (no braces, no index, a non-digit index, a brace inside, a derived key).
func TestPartitionIndexReadsBackWhatPartitionMakes(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"orders", "a:b", "t1234-orders"} {
		for _, i := range []int{0, 7, 1023} {
			if got, ok := PartitionIndex(Partition(name, i)); !ok || got != i {
				t.Errorf("PartitionIndex(%q) = %d, %v; want %d", Partition(name, i), got, ok, i)
			}
		}
	}
	for _, key := range []string{"orders", "{orders}", "{orders:}", "{:3}", "{orders:x1}", "{or{d}ers:3}", InPartition("orders", 3, "dead"), "orders:3", "{orders:-3}"} {
		if i, ok := PartitionIndex(key); ok {
			t.Errorf("PartitionIndex(%q) = %d, true; want not a partition's key", key, i)
		}
	}
}
