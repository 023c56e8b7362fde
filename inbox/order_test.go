package inbox

import "testing"

func TestDueIndexIsOneLedByTheGroupThenRetryAfter(t *testing.T) {
	t.Parallel()
	grouped := cols{}.spec("jobs")
	whole := cols{noGroup: true}.spec("jobs")
	tests := []struct {
		name    string
		table   Table
		indexes [][]string
		want    bool
	}{
		{name: "GroupRetryAfterID", table: grouped, indexes: [][]string{{"id"}, {"name", "retry_after", "id"}}, want: true},
		{name: "GroupRetryAfterOnly", table: grouped, indexes: [][]string{{"name", "retry_after"}}, want: true},
		{name: "NamesCaseFolded", table: grouped, indexes: [][]string{{"NAME", "Retry_After"}}, want: true},
		{name: "GroupOnly", table: grouped, indexes: [][]string{{"name"}}, want: false},
		{name: "GroupID", table: grouped, indexes: [][]string{{"name", "id"}}, want: false},
		{name: "RetryAfterFirst", table: grouped, indexes: [][]string{{"retry_after", "name"}}, want: false},
		{name: "None", table: grouped, want: false},
		{name: "NoGroupColumnRetryAfterID", table: whole, indexes: [][]string{{"retry_after", "id"}}, want: true},
		{name: "NoGroupColumnIDOnly", table: whole, indexes: [][]string{{"id"}}, want: false},
		{name: "ExpressionIndex", table: grouped, indexes: [][]string{{""}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.table.dueIndex(tt.indexes); got != tt.want {
				t.Fatalf("dueIndex(%v) = %v, want %v", tt.indexes, got, tt.want)
			}
		})
	}
}
