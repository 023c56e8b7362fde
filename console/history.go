package console

import (
	"context"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of the console's sampling (Options.SampleEvery, Options.SampleWindow).
const (
	// DefaultSampleEvery is how often Run samples every mount when Options.SampleEvery
	// is 0.
	DefaultSampleEvery = 5 * time.Second
	// DefaultSampleWindow is how far back the charts reach when Options.SampleWindow is
	// 0.
	DefaultSampleWindow = time.Hour
)

// sample is one reading of a mount's (or an inbox's) figures; -1 where it has none.
type sample struct {
	at                          time.Time
	dead, delayed, lag, pending int64
	added                       int64 // entries added to the stream so far (XINFO STREAM), -1: unknown
	read                        int64 // entries read by the group so far (XINFO GROUPS), -1: unknown
}

// ring is a bounded ring of samples, oldest first when read.
type ring struct {
	buf  []sample
	next int // where the next sample goes
	full bool
}

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
}

// samples returns the samples held, oldest first.
func (r *ring) samples() []sample {
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	return append(append([]sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// history is the last SampleWindow of samples of each mount and inbox, SampleWindow /
// SampleEvery samples each at most. It is safe for concurrent use.
type history struct {
	every time.Duration
	mu    sync.Mutex
	rings map[string]*ring // by row name ("mount:" or "inbox:" + name)
	size  int
}

func newHistory(every, window time.Duration) *history {
	return &history{every: every, rings: map[string]*ring{}, size: max(int(window/every), 2)}
}

func (h *history) add(name string, s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rings[name]
	if r == nil {
		r = &ring{buf: make([]sample, h.size)}
		h.rings[name] = r
	}
	r.add(s)
}

func (h *history) of(name string) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.rings[name]; r != nil {
		return r.samples()
	}
	return nil
}

// Sample reads the figures of every mount, partitioned stream and inbox once, as the overview reads them,
// and keeps them for the charts (the last Options.SampleWindow of them). Run calls it
// every Options.SampleEvery; call it yourself to sample on a schedule of your own. A
// figure that cannot be read is kept as unknown.
func (c *Console) Sample(ctx context.Context) {
	now := c.now()
	for _, m := range c.mounts {
		rw := c.mountRow(ctx, m)
		c.history.add("mount:"+m.Name, sampleOf(rw, now))
	}
	for _, ps := range c.partitioned {
		c.history.add("partitioned:"+ps.Name, sampleOf(c.partitionedRow(ctx, ps), now))
	}
	for _, ib := range c.inboxes {
		rw := c.inboxRow(ctx, ib)
		c.history.add("inbox:"+ib.Name, sampleOf(rw, now))
	}
}

// sampleOf is the sample of the row rw read at at.
func sampleOf(rw row, at time.Time) sample {
	if rw.Err != "" {
		return sample{at: at, added: -1, dead: -1, delayed: -1, lag: -1, pending: -1, read: -1}
	}
	return sample{at: at, added: rw.EntriesAdded, dead: rw.Dead, delayed: rw.Delayed, lag: rw.Lag, pending: rw.Pending, read: rw.EntriesRead}
}

// Run samples every mount and inbox every Options.SampleEvery (see Sample) until ctx
// is done, then returns ctx's error. Without Run (or calls of Sample) the charts stay
// empty; with SampleEvery negative it returns at once.
func (c *Console) Run(ctx context.Context) error {
	if c.opts.SampleEvery < 0 {
		return nil
	}
	t := time.NewTicker(c.history.every)
	defer t.Stop()
	for {
		c.Sample(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// chart is one metric of the last hour, drawn.
type chart struct {
	// ID names it in the page (charts of one row share a prefix).
	ID string
	// Label names the metric.
	Label string
	// Last, Min and Max are its last, least and greatest values, for a person.
	Last, Max, Min string
	// Points is how many samples it holds.
	Points int
	// SVG is the sparkline.
	SVG template.HTML
	// Span says how far back it reaches ("12m30s").
	Span string
}

// charts are the charts of the row name: backlog, pending, delayed, dead letters, and
// the rates between samples (a second) at which the group read (entries-read), the
// producers wrote (the stream's entries-added) and messages were dead-lettered (the
// dead letter's length; a purge or a replay counts as none).
func (c *Console) charts(name, id string) []chart {
	ss := c.history.of(name)
	if len(ss) == 0 {
		return nil
	}
	pick := func(f func(sample) int64) []float64 {
		out := make([]float64, len(ss))
		for k, s := range ss {
			out[k] = float64(f(s))
		}
		return out
	}
	span := showDuration(ss[len(ss)-1].at.Sub(ss[0].at))
	out := []chart{
		drawChart("Backlog", id+"-lag", pick(func(s sample) int64 { return s.lag })),
		drawChart("Pending", id+"-pending", pick(func(s sample) int64 { return s.pending })),
		drawChart("Delayed", id+"-delayed", pick(func(s sample) int64 { return s.delayed })),
		drawChart("Dead letters", id+"-dead", pick(func(s sample) int64 { return s.dead })),
		drawChart("Read / s", id+"-rate", perSecond(ss, func(s sample) int64 { return s.read })),
		drawChart("Added / s", id+"-added", perSecond(ss, func(s sample) int64 { return s.added })),
		drawChart("Dead-lettered / s", id+"-deadrate", perSecond(ss, func(s sample) int64 { return s.dead })),
	}
	for k := range out {
		out[k].Span = span
	}
	return out
}

// perSecond is the change a second of the counter f between samples (the first, and one
// next to an unknown, unknown: -1), never below 0.
func perSecond(ss []sample, f func(sample) int64) []float64 {
	out := make([]float64, len(ss))
	out[0] = -1
	for k := 1; k < len(ss); k++ {
		a, b := f(ss[k-1]), f(ss[k])
		dt := ss[k].at.Sub(ss[k-1].at).Seconds()
		if a < 0 || b < 0 || dt <= 0 {
			out[k] = -1
			continue
		}
		out[k] = max(float64(b-a)/dt, 0)
	}
	return out
}

// Sparkline geometry, in the SVG's own units (it scales to its box).
const (
	chartW = 240
	chartH = 48
)

// drawChart draws values (negative: unknown, left out) as a sparkline scaled from 0 to
// their greatest.
func drawChart(label, id string, values []float64) chart {
	ch := chart{Label: label, ID: id, Points: len(values), Last: "–", Min: "–", Max: "–"}
	lo, hi, known := 0.0, 0.0, 0
	for _, v := range values {
		if v < 0 {
			continue
		}
		if known == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
		known++
	}
	if known > 0 {
		ch.Min, ch.Max = showValue(lo), showValue(hi)
		if last := values[len(values)-1]; last >= 0 {
			ch.Last = showValue(last)
		}
	}
	scale := 1.0
	if hi > 0 {
		scale = (chartH - 4) / hi
	}
	step := float64(chartW)
	if len(values) > 1 {
		step = float64(chartW) / float64(len(values)-1)
	}
	var line strings.Builder
	segments := 0
	open := false
	for k, v := range values {
		if v < 0 {
			open = false
			continue
		}
		x := strconv.FormatFloat(float64(k)*step, 'f', 1, 64)
		y := strconv.FormatFloat(chartH-2-v*scale, 'f', 1, 64)
		if !open {
			line.WriteString(" M")
			segments++
		} else {
			line.WriteString(" L")
		}
		line.WriteString(x + " " + y)
		open = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %d %d" preserveAspectRatio="none" role="img" aria-label="%s over the last samples: from %s to %s, now %s" data-points="%d">`,
		chartW, chartH, template.HTMLEscapeString(label), ch.Min, ch.Max, ch.Last, known)
	fmt.Fprintf(&b, `<title>%s: min %s, max %s, now %s</title>`, template.HTMLEscapeString(label), ch.Min, ch.Max, ch.Last)
	if segments > 0 {
		fmt.Fprintf(&b, `<path class="line" d="%s"/>`, strings.TrimSpace(line.String()))
	}
	b.WriteString(`</svg>`)
	ch.SVG = template.HTML(b.String()) // numbers and escaped text only
	return ch
}

// showValue writes a chart's value: whole numbers as numbers, rates to one decimal.
func showValue(v float64) string {
	if v == float64(int64(v)) {
		return showNumber(int64(v))
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// deadGrowth is how many dead letters the row name gained over the samples held, and
// over how long (0 when it did not grow or is not known).
func (c *Console) deadGrowth(name string) (int64, time.Duration) {
	ss := c.history.of(name)
	if len(ss) < 2 {
		return 0, 0
	}
	first, last := ss[0], ss[len(ss)-1]
	if first.dead < 0 || last.dead <= first.dead {
		return 0, 0
	}
	return last.dead - first.dead, last.at.Sub(first.at)
}
