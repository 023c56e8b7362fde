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
	options  string // what the system ran with in this scenario
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
	capped                             int // runs that ended at the cap
	done                               float64
}

func (r row) ok() bool { return r.na == "" && r.err == nil && len(r.samples) > 0 }

func (r row) figures() figures {
	var f figures
	var rate, cmds, srv, cli, allocs, p50, p99, pmax, back, done []float64
	f.srvOK = true
	for _, s := range r.samples {
		rate = append(rate, s.rate())
		cmds = append(cmds, s.perMsg(float64(s.totalCmds())))
		f.srvOK = f.srvOK && s.srvOK
		srv = append(srv, s.perMsg(float64(s.srvCPU.Microseconds()))) // µs per msg = ms per 1k
		cli = append(cli, s.perMsg(float64(s.cliCPU.Microseconds())))
		allocs = append(allocs, s.perMsg(float64(s.mallocs)))
		done = append(done, float64(s.msgs))
		if s.capped {
			f.capped++
		}
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
	f.done = median(done)
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
	cols := 9 // after the name: the figures' columns
	if sc.sql {
		cols = 5
		fmt.Fprintln(tw, "system\trows/s\tdb CPU ms/1k\tclient CPU ms/1k\tallocs/row\trows done\t  options")
	} else {
		fmt.Fprintln(tw, "system\tmsgs/s\tcmds/msg\tredis CPU ms/1k\tclient CPU ms/1k\tallocs/msg\tlate p50\tp99\tmax\tcopy written p99\t  options")
	}
	for _, r := range rs {
		if r.scenario.name != sc.name {
			continue
		}
		switch {
		case r.na != "":
			fmt.Fprintf(tw, "%s\tn/a: %s%s\t  %s\n", r.system.name, r.na, strings.Repeat("\t", cols-1), r.options)
			continue
		case !r.ok():
			fmt.Fprintf(tw, "%s\tfailed: %v%s\t  %s\n", r.system.name, r.err, strings.Repeat("\t", cols-1), r.options)
			continue
		}
		f := r.figures()
		srv := "?"
		if f.srvOK {
			srv = fmt.Sprintf("%.1f", f.srvCPU)
		}
		if sc.sql {
			done := fmt.Sprintf("%.0f", f.done)
			if f.capped > 0 {
				done = fmt.Sprintf("%.0f (%d of %d runs capped)", f.done, f.capped, len(r.samples))
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.1f\t%.1f\t%s\t  %s\n", r.system.name, f.rate, srv, f.cliCPU, f.allocs, done, r.options)
			continue
		}
		late := "\t\t\t"
		if f.late {
			late = fmt.Sprintf("%s\t%s\t%s\t", ms(f.p50), ms(f.p99), ms(f.pmax))
			if f.back {
				late += ms(f.backP99)
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%s\t%.1f\t%.1f\t%s\t  %s\n", r.system.name, f.rate, f.cmds, srv, f.cliCPU, f.allocs, late, r.options)
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

// printRatios prints each settle row ÷ the raw loop with as many goroutines handling
// (the raw row of its scenario) and ÷ each peer; then settle's inbox ÷ each River row;
// then the targets.
func (rs results) printRatios(w io.Writer) {
	redis, sql := false, false
	for _, r := range rs {
		redis = redis || !r.scenario.sql
		sql = sql || r.scenario.sql
	}
	if redis {
		fmt.Fprintln(w, "== RATIOS: settle ÷ other (msgs/s: higher is better; Redis CPU and commands per message: lower is better); raw has as many goroutines as the row's scenario has workers")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tsettle\tbeside\t÷raw msgs/s\t÷raw redis CPU/msg\t÷raw cmds/msg\t÷asynq msgs/s\t÷asynq redis CPU/msg\t÷watermill msgs/s\t÷watermill redis CPU/msg\t")
		seen := map[string]bool{}
		for _, r := range rs {
			if !r.system.settle || r.scenario.sql || !r.ok() {
				continue
			}
			sc := r.scenario.name
			f := r.figures()
			cols := []string{fmt.Sprintf("raw K=%d", r.scenario.workers)}
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
				cols = append(cols, rateRatio(f, pf), cpuRatio(f, pf))
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
	}
	if sql {
		fmt.Fprintln(w, "== RATIOS: settle-inbox (examples/mailer's table: no index but the primary key) and settle-inbox-indexed (the README's recommended table) ÷ River on PostgreSQL, same Concurrency and MaxWorkers (rows/s: higher is better; database CPU per row: lower is better)")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tsettle\t÷river-cooldown-1ms rows/s\t÷river-cooldown-1ms db CPU/row\t÷river-default rows/s\t÷river-default db CPU/row\t")
		for _, r := range rs {
			if !strings.HasPrefix(r.system.name, "settle-inbox") || !r.ok() {
				continue
			}
			f := r.figures()
			var cols []string
			for _, peer := range []string{"river-cooldown-1ms", "river-default"} {
				p, ok := rs.find(peer, r.scenario.name)
				if !ok {
					cols = append(cols, "n/a", "n/a")
					continue
				}
				pf := p.figures()
				cols = append(cols, rateRatio(f, pf), cpuRatio(f, pf))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t\n", r.scenario.name, r.system.name, strings.Join(cols, "\t"))
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	rs.printTargets(w)
}

func rateRatio(f, pf figures) string {
	if pf.rate == 0 {
		return "n/a (0)"
	}
	return fmt.Sprintf("%.2fx", f.rate/pf.rate)
}

func cpuRatio(f, pf figures) string {
	if !f.srvOK || !pf.srvOK || f.srvCPU == 0 || pf.srvCPU == 0 { // 0: below /proc's 10ms tick
		return "?"
	}
	return fmt.Sprintf("%.2fx", f.srvCPU/pf.srvCPU)
}

// printTargets checks the targets of issue 9 ("Fast and safe by default"), then those
// of issue 6 that concern the peers and durable delays, at the tuned rows.
func (rs results) printTargets(w io.Writer) {
	fmt.Fprintln(w, "== TARGETS")
	check := func(what string, got float64, ok bool, met bool, format string) {
		switch {
		case !ok:
			fmt.Fprintf(w, "  %-72s not measured\n", what)
		case met:
			fmt.Fprintf(w, "  %-72s "+format+"  met\n", what, got)
		default:
			fmt.Fprintf(w, "  %-72s "+format+"  MISSED\n", what, got)
		}
	}
	ratio := func(sys, peer, sc string) (float64, float64, bool) {
		a, ok1 := rs.find(sys, sc)
		b, ok2 := rs.find(peer, sc)
		if !ok1 || !ok2 {
			return 0, 0, false
		}
		fa, fb := a.figures(), b.figures()
		if fb.rate == 0 {
			return 0, 0, false
		}
		cpu := -1.0
		if fa.srvOK && fb.srvOK && fa.srvCPU > 0 && fb.srvCPU > 0 {
			cpu = fa.srvCPU / fb.srvCPU
		}
		return fa.rate / fb.rate, cpu, true
	}
	workers := func(sc string) string {
		for _, r := range rs {
			if r.scenario.name == sc {
				return fmt.Sprintf("raw K=%d", r.scenario.workers)
			}
		}
		return "raw"
	}

	// Redis, at the options users run: each ÷ the raw loop with as many goroutines.
	for _, t := range []struct{ sys, sc string }{
		{"settle-stream-default", "drain-8"},
		{"settle-stream-c1", "drain-1"},
		{"settle-stream-c8", "drain-8"},
	} {
		r, cpu, ok := ratio(t.sys, "raw", t.sc)
		check(fmt.Sprintf("%s %s msgs/s ÷ %s >= 0.85", t.sys, t.sc, workers(t.sc)), r, ok, r >= 0.85, "%.2fx")
		check(fmt.Sprintf("%s %s redis CPU/msg ÷ %s <= 1.2", t.sys, t.sc, workers(t.sc)), cpu, ok && cpu >= 0, cpu <= 1.2, "%.2fx")
	}
	// Issue 25: a ClaimingStream at 0.75x, a ReliableList at 0.7x with at most 0.1 Redis
	// commands per message (a batch taken and completed per script call), a stream retry
	// at 0.6x the raw loop doing the same copy + ack unfenced and pipelined (raw-copy).
	for _, t := range []struct {
		sys string
		min float64
	}{{"settle-claiming-default", 0.75}, {"settle-reliable-list-default", 0.7}} {
		r, _, ok := ratio(t.sys, "raw", "drain-8")
		check(fmt.Sprintf("%s drain-8 msgs/s ÷ %s >= %.2g", t.sys, workers("drain-8"), t.min), r, ok, r >= t.min, "%.2fx")
	}
	rl, ok := rs.find("settle-reliable-list-default", "drain-8")
	cmds := rl.figures().cmds
	check("settle-reliable-list-default drain-8 Redis commands/msg <= 0.1", cmds, ok, cmds <= 0.1, "%.3f")
	r, _, ok := ratio("settle-stream-default", "raw-copy", "retry-once")
	check("settle-stream-default retry-once msgs/s ÷ raw-copy >= 0.6", r, ok, r >= 0.6, "%.2fx")

	// The inbox on PostgreSQL, on both tables, ÷ each River row, and on its own at
	// Concurrency(1).
	for _, sc := range []string{"sql-drain-8", "sql-drain-100", "sql-retry-once-100"} {
		for _, sys := range []string{"settle-inbox", "settle-inbox-indexed"} {
			for _, peer := range []string{"river-cooldown-1ms", "river-default"} {
				r, _, ok := ratio(sys, peer, sc)
				check(fmt.Sprintf("%s %s rows/s ÷ %s >= 1.0", sys, sc, peer), r, ok, r >= 1.0, "%.2fx")
			}
		}
	}
	in, ok := rs.find("settle-inbox", "sql-drain-1")
	rate := in.figures().rate
	check("settle-inbox sql-drain-1 (Concurrency(1)) rows/s >= 2000", rate, ok, rate >= 2000, "%.0f")

	// Issue 24: settleotel at the default options (one mount, its defaults; metrics on;
	// traces sampled by the user's ParentBased(TraceIDRatioBased(1%)), -otel-1pct) beside
	// it off: at most 1.3x the client CPU per message. Every delivery traced (-otel, the
	// SDK's default sampler on messages with no producer's context) is informational.
	for _, t := range []struct {
		suffix, sc string
		target     bool
	}{
		{"-otel-1pct", "drain-8", true}, {"-otel-1pct", "retry-once", true},
		{"-otel", "drain-8", false}, {"-otel", "retry-once", false},
	} {
		on, ok1 := rs.find("settle-stream-default"+t.suffix, t.sc)
		off, ok2 := rs.find("settle-stream-default", t.sc)
		fon, foff := on.figures(), off.figures()
		ok := ok1 && ok2 && foff.cliCPU > 0
		cpu := 0.0
		if ok {
			cpu = fon.cliCPU / foff.cliCPU
		}
		name := fmt.Sprintf("settle-stream-default%s %s client CPU/msg ÷ without settleotel", t.suffix, t.sc)
		if t.target {
			check(name+" <= 1.3", cpu, ok, cpu <= 1.3, "%.2fx")
		} else if ok {
			fmt.Fprintf(w, "  %-72s %.2fx (informational)\n", name, cpu)
		}
		if ok {
			fmt.Fprintf(w, "  %-72s %.1f → %.1f allocs/msg, %.1f → %.1f client ms/1k msgs\n", "  settleotel"+t.suffix+" "+t.sc, foff.allocs, fon.allocs, foff.cliCPU, fon.cliCPU)
		}
	}
	// Issue 6, at the tuned rows (one mount per worker).
	tuned := ""
	for _, r := range rs {
		if name, ok := strings.CutPrefix(r.system.name, "settle-stream-tuned-"); ok && !strings.HasSuffix(name, "-otel") {
			tuned = "tuned-" + name
			break
		}
	}
	if tuned == "" {
		return
	}
	// Issue 14: settleotel installed (metrics and traces on, in memory) beside it off:
	// every delivery traced (the target), and 1% of them (informational).
	for _, t := range []struct{ suffix, sc string }{
		{"-otel", "drain-1"}, {"-otel", "drain-8"}, {"-otel", "retry-once"},
		{"-otel-1pct", "drain-8"}, {"-otel-1pct", "retry-once"},
	} {
		sc := t.sc
		on, ok1 := rs.find("settle-stream-"+tuned+t.suffix, sc)
		off, ok2 := rs.find("settle-stream-"+tuned, sc)
		fon, foff := on.figures(), off.figures()
		ok := ok1 && ok2 && foff.cliCPU > 0
		cpu := 0.0
		if ok {
			cpu = fon.cliCPU / foff.cliCPU
		}
		check(fmt.Sprintf("settle-stream-%s%s %s client CPU/msg ÷ without settleotel <= 1.15", tuned, t.suffix, sc), cpu, ok, cpu <= 1.15, "%.2fx")
		if ok {
			fmt.Fprintf(w, "  %-72s %.1f → %.1f allocs/msg, %.1f → %.1f client ms/1k msgs\n", "  settleotel"+t.suffix+" "+sc, foff.allocs, fon.allocs, foff.cliCPU, fon.cliCPU)
		}
	}
	fmt.Fprintln(w, "  (issue 6, at the tuned rows)")
	for _, sc := range []string{"drain-1", "drain-8"} {
		r, _, ok := ratio("settle-stream-"+tuned, "watermill", sc)
		check("settle-stream-"+tuned+" "+sc+" msgs/s ÷ watermill >= 10", r, ok, r >= 10, "%.2fx")
		r, _, ok = ratio("settle-stream-"+tuned, "asynq", sc)
		check("settle-stream-"+tuned+" "+sc+" msgs/s ÷ asynq >= 40", r, ok, r >= 40, "%.2fx")
	}
	d, ok := rs.find("settle-stream-zset-"+tuned, "delay-1s")
	p99 := float64(d.figures().p99.Microseconds()) / 1000
	check("settle-stream-zset-"+tuned+" delay-1s lateness p99 <= 50ms (ms)", p99, ok, p99 <= 50, "%.1f")
	back := float64(d.figures().backP99.Microseconds()) / 1000
	check("settle-stream-zset-"+tuned+" delay-1s copy written p99 <= 50ms (ms)", back, ok && d.figures().back, back <= 50, "%.1f")
}
