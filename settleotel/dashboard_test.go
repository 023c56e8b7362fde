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
	"settle_attempts_bucket", "settle_backlog", "settle_claims_total", "settle_consumer_group_lag",
	"settle_dead_letters", "settle_delay_lateness_seconds_bucket", "settle_delayed", "settle_delayed_overdue",
	"settle_deliveries_total", "settle_expired_leases", "settle_handler_duration_seconds_bucket", "settle_in_flight",
	"settle_leased", "settle_pending", "settle_pending_oldest_idle_seconds", "settle_read_failures_total",
	"settle_settlement_duration_seconds_bucket", "settle_settlements_total",
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
	names := regexp.MustCompile(`settle_[a-z_]+`)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range names.FindAllString(tg.Expr, -1) {
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
