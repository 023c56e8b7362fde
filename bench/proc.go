package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// procStat is what the benchmark reads of one process's /proc/<pid>/stat.
type procStat struct {
	ppid           int
	utime, stime   time.Duration // the process's own CPU
	cutime, cstime time.Duration // CPU of its children that have exited and been waited for
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ticks := func(j int) time.Duration {
		n, _ := strconv.ParseInt(f[j], 10, 64)
		return time.Duration(n) * time.Second / clockTicks
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, utime: ticks(11), stime: ticks(12), cutime: ticks(13), cstime: ticks(14)}, nil
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// treeCPU is the CPU time so far of a server that forks a process per connection
// (PostgreSQL's postmaster): its own, that of its live children, and that of its children
// that have exited (its cutime and cstime, once it has waited for them). A child that
// exits between two readings moves from the second term to the third, so the difference
// of two readings counts it once.
func treeCPU(root int) (time.Duration, error) {
	st, err := readProcStat(root)
	if err != nil {
		return 0, err
	}
	total := st.utime + st.stime + st.cutime + st.cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		c, err := readProcStat(pid)
		if err != nil || c.ppid != root {
			continue // gone since ReadDir, or not a child
		}
		total += c.utime + c.stime
	}
	return total, nil
}
