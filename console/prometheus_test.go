package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/console"
)

// fakeProm is a Prometheus HTTP API that answers query_range with fixed series, by the
// metric the query names, and records the queries.
type fakeProm struct {
	mu      sync.Mutex
	queries []map[string]string
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/query_range" || r.ParseForm() != nil {
		http.Error(w, "no", http.StatusNotFound)
		return
	}
	q := map[string]string{}
	for _, k := range []string{"query", "start", "end", "step"} {
		q[k] = r.PostFormValue(k)
	}
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	start, _ := strconv.ParseFloat(q["start"], 64)
	step, _ := strconv.ParseFloat(q["step"], 64)
	points := func(vs ...string) [][2]any {
		var out [][2]any
		for k, v := range vs {
			out = append(out, [2]any{start + float64(k)*step, v})
		}
		return out
	}
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var result []series
	switch {
	case strings.Contains(q["query"], "settle_backlog"):
		result = []series{{Metric: map[string]string{}, Values: points("3", "5", "8")}}
	case strings.Contains(q["query"], "settle_settlements_total"):
		result = []series{
			{Metric: map[string]string{"settle_action": "dead_letter"}, Values: points("0", "0.5", "1")},
			{Metric: map[string]string{"settle_action": "ack"}, Values: points("10", "12", "11")},
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": result}})
}

func TestWithPrometheusTheChartsAreDrawnFromItsMetricsOverTheChosenRange(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t)
	prom := &fakeProm{}
	ps := httptest.NewServer(prom)
	t.Cleanup(ps.Close)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	_, srv, cl := w.serveConsole(t, console.Options{Prometheus: ps.URL, Clock: clock.Now})

	status, body := get(t, cl, srv.URL+"/mounts/refunds?range=15m")
	if status != http.StatusOK || !strings.Contains(body, "The last 15m") || !strings.Contains(body, `id="chart-source">From Prometheus`) {
		t.Fatalf("the mount page with Prometheus = %d: want the last 15m from Prometheus:\n%s", status, body)
	}
	if points, last := chartOf(t, body, "m-lag"); points != "121" || last != "–" {
		t.Fatalf("the backlog chart: %s points, last %s; want the 121 steps of 15m, the last unknown", points, last)
	}
	if !strings.Contains(body, `aria-label="Backlog over the last samples: from 3 to 8`) {
		t.Fatalf("the backlog chart does not span 3 to 8:\n%s", body)
	}
	ack := strings.Index(body, `id="m-settled-ack"`)
	dead := strings.Index(body, `id="m-settled-dead_letter"`)
	if ack < 0 || dead < ack {
		t.Fatalf("the settlements by action are not drawn, ack then dead_letter:\n%s", body)
	}
	prom.mu.Lock()
	first := prom.queries[0]
	n := len(prom.queries)
	prom.mu.Unlock()
	end := float64(clock.Now().Unix())
	if first["query"] != `sum(settle_backlog{settle_mount="refunds"})` || first["step"] != "7.5" || first["end"] != fmt.Sprintf("%.3f", end) || first["start"] != fmt.Sprintf("%.3f", end-900) {
		t.Fatalf("the first query %v: want the backlog of refunds over 15m in steps of 7.5 s", first)
	}
	if n != 6 {
		t.Fatalf("%d queries for one page, want 6", n)
	}
	if _, body := get(t, cl, srv.URL+"/?range=6h"); !strings.Contains(body, "The last 6h") || !strings.Contains(body, `id="m0-settled-ack"`) {
		t.Fatalf("the overview does not draw 6h from Prometheus:\n%s", body)
	}
}

func TestWhenPrometheusFailsTheSamplesAreDrawnAndTheFailureSaid(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.seed(t)
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(ps.Close)
	c, srv, cl := w.serveConsole(t, console.Options{Prometheus: ps.URL})
	c.Sample(w.ctx)
	status, body := get(t, cl, srv.URL+"/mounts/refunds")
	if status != http.StatusOK || !strings.Contains(body, "Prometheus did not answer") || !strings.Contains(body, "The last hour") {
		t.Fatalf("with Prometheus down = %d: want the failure said and the samples drawn:\n%s", status, body)
	}
	if points, _ := chartOf(t, body, "m-lag"); points != "1" {
		t.Fatalf("the backlog chart holds %s points, want the 1 sample", points)
	}
}
