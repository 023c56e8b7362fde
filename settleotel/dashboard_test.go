package settleotel_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"

	"github.com/settlekit/settle/settleotel"
)

// promNames are the Prometheus names of settleotel's metrics, as the exporter renders
// them (examples/observability's test scrapes them).
var promNames = []string{
	"messaging_client_consumed_messages_total", "messaging_client_operation_duration_seconds_bucket",
	"messaging_process_duration_seconds_bucket",
	"settle_attempts_bucket", "settle_backlog", "settle_claims_total", "settle_consumer_group_lag",
	"settle_dead_letters", "settle_delay_lateness_seconds_bucket", "settle_delayed", "settle_delayed_overdue",
	"settle_expired_leases", "settle_flow_in_use", "settle_flow_keys_at_limit", "settle_flow_wait_seconds_bucket", "settle_flow_wait_seconds_count", "settle_flow_waiting", "settle_in_flight",
	"settle_leased", "settle_pending", "settle_pending_oldest_idle_seconds", "settle_read_failures_total",
	"settle_settlements_total",
}

// The dashboard is valid JSON and every query names only metrics settleotel exports,
// by their Prometheus names.
func TestDashboardQueriesNameOnlySettleotelsMetrics(t *testing.T) {
	t.Parallel()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(settleotel.Dashboard, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	names := regexp.MustCompile(`\b(?:settle|messaging)_[a-z_]+\b`) // a metric's name, or a label's: labels are skipped
	labels := regexp.MustCompile(`^(settle_(mount|limit|limit_kind|action|outcome|result|claim_kind|dead_letter_destination|transport)|messaging_(operation_type|operation_name|system|destination_name|consumer_group_name))$`)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
				if labels.MatchString(n) {
					continue
				}
				if !slices.Contains(promNames, n) {
					t.Fatalf("panel %q queries %s, which settleotel does not export", p.Title, n)
				}
				used[n] = true
			}
		}
	}
	for _, n := range promNames {
		if !used[n] {
			t.Fatalf("no panel shows %s", n)
		}
	}
}
