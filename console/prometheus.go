package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ranges a page's charts may be drawn over from Prometheus (?range=), the first the
// default.
var promRanges = []string{"1h", "15m", "6h", "24h"}

// promPoints is about how many points a chart drawn from Prometheus holds: the step
// of a query is its range over this.
const promPoints = 120

// promMaxSeries bounds the series one query may answer (settlements by action: a few).
const promMaxSeries = 16

// promMaxBody bounds the bytes read of one answer of Prometheus.
const promMaxBody = 4 << 20

// promRange reads the range a request asks for, one of promRanges.
func promRange(r *http.Request) (string, time.Duration) {
	v := r.FormValue("range")
	if !slices.Contains(promRanges, v) {
		v = promRanges[0]
	}
	d, _ := time.ParseDuration(v)
	return v, d
}

// promCharts draws the charts of the mount name from settleotel's metrics in
// Prometheus over the last rng: backlog, pending, delayed, dead letters, deliveries a
// second, and settlements a second by action.
func (c *Console) promCharts(ctx context.Context, name, id string, rng time.Duration) ([]chart, error) {
	end := c.now()
	start := end.Add(-rng)
	step := max(rng/promPoints, time.Second)
	sel := `{settle_mount="` + promEscape(name) + `"}`
	window := "[" + strconv.FormatInt(int64(max(4*step, time.Minute)/time.Second), 10) + "s]"
	span := showDuration(rng)
	var out []chart
	for _, q := range []struct{ label, suffix, expr string }{
		{"Backlog", "lag", "sum(settle_backlog" + sel + ")"},
		{"Pending", "pending", "sum(settle_pending" + sel + ")"},
		{"Delayed", "delayed", "sum(settle_delayed" + sel + ")"},
		{"Dead letters", "dead", "sum(settle_dead_letters" + sel + ")"},
		{"Read / s", "rate", "sum(rate(messaging_client_consumed_messages_total" + sel + window + "))"},
		{"Settled / s", "settled", "sum by (settle_action) (rate(settle_settlements_total" + sel + window + "))"},
	} {
		series, err := c.promQuery(ctx, q.expr, start, end, step)
		if err != nil {
			return nil, err
		}
		if q.suffix != "settled" {
			var values []float64
			if len(series) > 0 {
				values = series[0].values
			}
			out = append(out, drawChart(q.label, id+"-"+q.suffix, valuesOrUnknown(values)))
			continue
		}
		for _, s := range series {
			action := s.labels["settle_action"]
			out = append(out, drawChart("Settled / s: "+action, id+"-settled-"+action, valuesOrUnknown(s.values)))
		}
	}
	for k := range out {
		out[k].Span = span
	}
	return out, nil
}

// valuesOrUnknown is values, or one unknown point when there are none.
func valuesOrUnknown(values []float64) []float64 {
	if len(values) == 0 {
		return []float64{-1}
	}
	return values
}

// promSeries is one series of a range query: its labels and its values, a missing
// point as -1.
type promSeries struct {
	labels map[string]string
	values []float64
}

// promQuery runs the range query expr against Options.Prometheus (its HTTP API,
// /api/v1/query_range) and returns its series, each with a value for every step from
// start to end (-1 where the series has none).
func (c *Console) promQuery(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	u, err := url.Parse(strings.TrimSuffix(c.opts.Prometheus, "/") + "/api/v1/query_range")
	if err != nil {
		return nil, fmt.Errorf("console: Prometheus %q: %w", c.opts.Prometheus, err)
	}
	form := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cl := c.opts.PrometheusClient
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console: Prometheus query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	var ans struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
			ResultType string `json:"resultType"`
		} `json:"data"`
		Error  string `json:"error"`
		Status string `json:"status"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, promMaxBody)).Decode(&ans); err != nil {
		return nil, fmt.Errorf("console: Prometheus query %s: %s: %w", expr, resp.Status, err)
	}
	if ans.Status != "success" || ans.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("console: Prometheus query %s: %s %s: %s", expr, resp.Status, ans.Status, ans.Error)
	}
	n := int(end.Sub(start)/step) + 1
	var out []promSeries
	for _, r := range ans.Data.Result[:min(len(ans.Data.Result), promMaxSeries)] {
		s := promSeries{labels: r.Metric, values: make([]float64, n)}
		for k := range s.values {
			s.values[k] = -1
		}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			k := int((time.UnixMilli(int64(ts*1000)).Sub(start) + step/2) / step)
			if err != nil || k < 0 || k >= n || f != f { // f != f: NaN
				continue
			}
			s.values[k] = max(f, 0)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b promSeries) int {
		return strings.Compare(a.labels["settle_action"], b.labels["settle_action"])
	})
	return out, nil
}

// promEscape escapes s for a PromQL double-quoted string.
func promEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// chartHead says where a page's charts come from, and offers the ranges Prometheus can
// draw.
type chartHead struct {
	// Err says why Prometheus could not draw them ("" when it did, or is not given).
	Err string
	// Range is the range drawn from Prometheus ("" when the samples are drawn).
	Range string
	// Ranges link the page over each range Prometheus can draw (none without it).
	Ranges []crumb
}

// chartsOf returns the charts of the mount or inbox of the row name (id prefixes their
// ids): from Prometheus over the request's range when Options.Prometheus is given and
// it answers (a mount only), else from the console's samples. head says which.
func (c *Console) chartsOf(r *http.Request, rowName, mountName, id string, head *chartHead) []chart {
	if c.opts.Prometheus != "" && mountName != "" {
		v, rng := promRange(r)
		if head.Err == "" { // one failure is said once a page, and the samples drawn
			charts, err := c.promCharts(r.Context(), mountName, id, rng)
			if err == nil {
				head.Range = v
				return charts
			}
			head.Err = err.Error()
			c.log.Warn("settle console: Prometheus", "err", err)
		}
	}
	return c.charts(rowName, id)
}

// ranges fills in the range links of head for the page at path.
func (c *Console) ranges(head *chartHead, path string) {
	if c.opts.Prometheus == "" {
		return
	}
	for _, v := range promRanges {
		head.Ranges = append(head.Ranges, crumb{Href: path + "?range=" + v, Label: v})
	}
}
