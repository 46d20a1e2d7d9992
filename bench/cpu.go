package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time, read from the processes themselves: what a request costs the
// server does not swing with the machine's load the way throughput does
// (other processes take cores, not cycles per request).

// clockTick is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux the bench runs on: `getconf CLK_TCK`).
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU time process pid has used, its threads
// and the children it has waited for included; 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields count from after its closing parenthesis, which is field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks uint64
	for _, s := range f[11:15] { // utime, stime, cutime, cstime: fields 14-17
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// selfCPU is this process's user+system CPU time (the load generator),
// to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// treeCPU is the CPU time of process root and of its children (one level:
// PostgreSQL's postmaster and its backends), those it has waited for
// included.
func treeCPU(root int) time.Duration {
	total := procCPU(root)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return total
	}
	want := strconv.Itoa(root)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); i >= 0 && len(f) > 1 && f[1] == want {
			total += procCPU(pid)
		}
	}
	return total
}

// postmasterCPU returns a reader of the CPU time a PostgreSQL cluster has
// used (the postmaster, its backends and helpers), found through the
// postmaster.pid file of its data directory; nil if there is none.
func postmasterCPU(dataDir string) func() time.Duration {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return nil
	}
	return func() time.Duration { return treeCPU(pid) }
}

// usage is what a load window cost: CPU time of the server's processes,
// of the database they use (PostgreSQL), of the load generator (this
// process), and of the whole machine, busy and available (all cores).
type usage struct {
	server, db, load time.Duration
	busy, total      time.Duration
}

// snapshot reads the counters usage is the difference of.
type snapshot struct {
	server, db, load time.Duration
	busy, total      uint64 // clock ticks, all CPUs
}

func takeSnapshot(t *proc) snapshot {
	s := snapshot{server: t.cpu(), load: selfCPU()}
	if t.dbCPU != nil {
		s.db = t.dbCPU()
	}
	s.busy, s.total = cpuTicks()
	return s
}

func (a snapshot) to(b snapshot) usage {
	return usage{server: b.server - a.server, db: b.db - a.db, load: b.load - a.load,
		busy: time.Duration(b.busy-a.busy) * clockTick, total: time.Duration(b.total-a.total) * clockTick}
}

// others is the CPU time the rest of the machine used meanwhile (other
// processes: the peer or PostgreSQL when not measured, other users).
func (u usage) others() time.Duration {
	if o := u.busy - u.server - u.db - u.load; o > 0 {
		return o
	}
	return 0
}

// perOp is d per operation, in microseconds.
func perOp(d time.Duration, ops int) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(ops)
}

// syncCounter counts the fdatasync and fsync calls of one process with
// `perf stat` on the syscall tracepoints (counting in the kernel: the
// process is not slowed as under strace).
type syncCounter struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// countSyncs starts counting pid's syncs, or returns nil when perf or the
// tracepoints are not there.
func countSyncs(pid int) *syncCounter {
	if _, err := exec.LookPath("perf"); err != nil {
		return nil
	}
	c := &syncCounter{}
	c.cmd = exec.Command("perf", "stat", "-x,", "--no-big-num", "-e", "syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync", "-p", strconv.Itoa(pid))
	c.cmd.Stderr = &c.out
	if err := c.cmd.Start(); err != nil {
		return nil
	}
	time.Sleep(100 * time.Millisecond) // attached before the window starts
	return c
}

// stop ends the count and returns the calls counted, or -1 if perf
// counted nothing it could report.
func (c *syncCounter) stop() int64 {
	if c == nil {
		return -1
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	_ = c.cmd.Wait()
	return c.count()
}

// count reads perf's output (-x,: value,unit,event,...): the sum of the
// counted events, or -1 if none was counted.
func (c *syncCounter) count() int64 {
	var n int64 = -1
	for _, line := range strings.Split(c.out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_") {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue // "<not supported>", "<not counted>"
		}
		n = max(n, 0) + v
	}
	return n
}
