package keys

import "testing"

func TestPausedSharesTheSourceSlotAndNamesTheGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, group, want string
	}{
		{name: "StreamGroup", key: "orders", group: "workers", want: "{orders}:paused:workers"},
		{name: "TaggedStreamGroup", key: "{refunds}:in", group: "g", want: "{refunds}:in:paused:g"},
		{name: "List", key: "jobs", want: "{jobs}:paused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Paused(tt.key, tt.group)
			if got != tt.want {
				t.Fatalf("Paused(%q, %q) = %q, want %q", tt.key, tt.group, got, tt.want)
			}
			if Slot(got) != Slot(tt.key) {
				t.Fatalf("Paused(%q, %q) = %q hashes to slot %d, the source to %d", tt.key, tt.group, got, Slot(got), Slot(tt.key))
			}
		})
	}
	if Paused("orders", "a") == Paused("orders", "b") {
		t.Fatal("two groups of one stream share a control key: pausing one would pause both")
	}
}
