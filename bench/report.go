package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one system on one scenario: its samples, or why it has none.
type row struct {
	system   system
	scenario scenario
	samples  []*sample
	na       string
	err      error
}

// figures are a row's medians.
type figures struct {
	rate, cmds, srvCPU, cliCPU, allocs float64 // msgs/s, per msg, ms/1k, ms/1k, per msg
	srvOK                              bool
	p50, p99, pmax                     time.Duration
	late                               bool
	backP99                            time.Duration // retry copies written to the stream, after due
	back                               bool
}

func (r row) ok() bool { return r.na == "" && r.err == nil && len(r.samples) > 0 }

func (r row) figures() figures {
	var f figures
	var rate, cmds, srv, cli, allocs, p50, p99, pmax, back []float64
	f.srvOK = true
	for _, s := range r.samples {
		m := float64(s.msgs)
		rate = append(rate, m/s.elapsed.Seconds())
		cmds = append(cmds, float64(s.totalCmds())/m)
		f.srvOK = f.srvOK && s.srvOK
		srv = append(srv, float64(s.srvCPU.Microseconds())/1000/m*1000)
		cli = append(cli, float64(s.cliCPU.Microseconds())/1000/m*1000)
		allocs = append(allocs, float64(s.mallocs)/m)
		if len(s.late) > 0 {
			f.late = true
			p50 = append(p50, float64(percentile(s.late, 0.50)))
			p99 = append(p99, float64(percentile(s.late, 0.99)))
			pmax = append(pmax, float64(percentile(s.late, 1)))
		}
		if len(s.back) > 0 {
			f.back = true
			back = append(back, float64(percentile(s.back, 0.99)))
		}
	}
	f.rate, f.cmds, f.srvCPU, f.cliCPU, f.allocs = median(rate), median(cmds), median(srv), median(cli), median(allocs)
	f.p50, f.p99, f.pmax = time.Duration(median(p50)), time.Duration(median(p99)), time.Duration(median(pmax))
	f.backP99 = time.Duration(median(back))
	return f
}

type results []row

func (rs results) find(system, scenario string) (row, bool) {
	for _, r := range rs {
		if r.system.name == system && r.scenario.name == scenario {
			return r, r.ok()
		}
	}
	return row{}, false
}

func (rs results) printScenario(w io.Writer, sc scenario) {
	fmt.Fprintf(w, "== %s: %s\n", sc.name, sc.about)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tmsgs/s\tcmds/msg\tredis CPU ms/1k\tclient CPU ms/1k\tallocs/msg\tlate p50\tp99\tmax\tcopy written p99\t")
	for _, r := range rs {
		if r.scenario.name != sc.name {
			continue
		}
		switch {
		case r.na != "":
			fmt.Fprintf(tw, "%s\tn/a: %s\t\t\t\t\t\t\t\t\t\n", r.system.name, r.na)
			continue
		case !r.ok():
			fmt.Fprintf(tw, "%s\tfailed: %v\t\t\t\t\t\t\t\t\n", r.system.name, r.err)
			continue
		}
		f := r.figures()
		srv := "?"
		if f.srvOK {
			srv = fmt.Sprintf("%.1f", f.srvCPU)
		}
		late := "\t\t\t"
		if f.late {
			late = fmt.Sprintf("%s\t%s\t%s\t", ms(f.p50), ms(f.p99), ms(f.pmax))
			if f.back {
				late += ms(f.backP99)
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%s\t%.1f\t%.1f\t%s\t\n", r.system.name, f.rate, f.cmds, srv, f.cliCPU, f.allocs, late)
	}
	_ = tw.Flush()
	for _, r := range rs {
		if r.scenario.name != sc.name {
			continue
		}
		for i, s := range r.samples {
			if s.note != "" {
				fmt.Fprintf(w, "  note: %s run %d: %s\n", r.system.name, i+1, s.note)
			}
		}
	}
	fmt.Fprintln(w)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// printRatios prints settle ÷ the raw loop and settle ÷ each peer, per scenario, and
// the targets.
func (rs results) printRatios(w io.Writer) {
	fmt.Fprintln(w, "== RATIOS: settle ÷ other (msgs/s: higher is better; Redis CPU and commands per message: lower is better)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tsettle\t÷raw msgs/s\t÷raw redis CPU/msg\t÷raw cmds/msg\t÷asynq msgs/s\t÷asynq redis CPU/msg\t÷watermill msgs/s\t÷watermill redis CPU/msg\t")
	seen := map[string]bool{}
	for _, r := range rs {
		if !r.system.settle || !r.ok() {
			continue
		}
		sc := r.scenario.name
		f := r.figures()
		cols := []string{}
		for _, peer := range []string{"raw", "asynq", "watermill"} {
			p, ok := rs.find(peer, sc)
			if !ok {
				n := 2
				if peer == "raw" {
					n = 3
				}
				for range n {
					cols = append(cols, "n/a")
				}
				continue
			}
			pf := p.figures()
			cols = append(cols, fmt.Sprintf("%.2fx", f.rate/pf.rate), cpuRatio(f, pf))
			if peer == "raw" {
				cols = append(cols, fmt.Sprintf("%.2fx", f.cmds/pf.cmds))
			}
		}
		name := sc
		if seen[sc] {
			name = ""
		}
		seen[sc] = true
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, r.system.name, strings.Join(cols, "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	rs.printTargets(w)
}

func cpuRatio(f, pf figures) string {
	if !f.srvOK || !pf.srvOK || f.srvCPU == 0 || pf.srvCPU == 0 { // 0: below /proc's 10ms tick
		return "?"
	}
	return fmt.Sprintf("%.2fx", f.srvCPU/pf.srvCPU)
}

// printTargets checks the targets of issue 6 item 2.
func (rs results) printTargets(w io.Writer) {
	fmt.Fprintln(w, "== TARGETS")
	check := func(what string, got float64, ok bool, met bool, format string) {
		switch {
		case !ok:
			fmt.Fprintf(w, "  %-62s not measured\n", what)
		case met:
			fmt.Fprintf(w, "  %-62s "+format+"  met\n", what, got)
		default:
			fmt.Fprintf(w, "  %-62s "+format+"  MISSED\n", what, got)
		}
	}
	ratio := func(sys, peer, sc string) (float64, float64, bool) {
		a, ok1 := rs.find(sys, sc)
		b, ok2 := rs.find(peer, sc)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		fa, fb := a.figures(), b.figures()
		cpu := -1.0
		if fa.srvOK && fb.srvOK && fa.srvCPU > 0 && fb.srvCPU > 0 {
			cpu = fa.srvCPU / fb.srvCPU
		}
		return fa.rate / fb.rate, cpu, true
	}
	for _, sc := range []string{"drain-1", "drain-8"} {
		r, cpu, ok := ratio("settle-stream", "raw", sc)
		check("settle-stream "+sc+" msgs/s ÷ raw >= 0.85", r, ok, r >= 0.85, "%.2fx")
		check("settle-stream "+sc+" redis CPU/msg ÷ raw <= 1.2", cpu, ok && cpu >= 0, cpu <= 1.2, "%.2fx")
		r, _, ok = ratio("settle-stream", "watermill", sc)
		check("settle-stream "+sc+" msgs/s ÷ watermill >= 10", r, ok, r >= 10, "%.2fx")
		r, _, ok = ratio("settle-stream", "asynq", sc)
		check("settle-stream "+sc+" msgs/s ÷ asynq >= 40", r, ok, r >= 40, "%.2fx")
	}
	r, _, ok := ratio("settle-stream", "raw-copy", "retry-once")
	check("settle-stream retry-once msgs/s ÷ raw-copy >= 0.6", r, ok, r >= 0.6, "%.2fx")
	d, ok := rs.find("settle-stream-zset", "delay-1s")
	p99 := float64(d.figures().p99.Microseconds()) / 1000
	check("settle-stream-zset delay-1s lateness p99 <= 50ms (ms)", p99, ok, p99 <= 50, "%.1f")
	back := float64(d.figures().backP99.Microseconds()) / 1000
	check("settle-stream-zset delay-1s copy written p99 <= 50ms (ms)", back, ok && d.figures().back, back <= 50, "%.1f")
}
