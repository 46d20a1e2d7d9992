package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// burnDecode decodes JSON for d, the only work of the process meanwhile.
func burnDecode(t *testing.T, d time.Duration) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","n":[1,2,3,4,5,6,7,8]}}}`)
	for end := time.Now().Add(d); time.Now().Before(end); {
		var v map[string]any
		require.NoError(t, json.Unmarshal(body, &v))
	}
}

// The profile of a process that only decodes JSON is read back through
// go tool pprof, and its samples are counted as decoding.
func TestWhereSortsProfileSamplesIntoKinds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, pprof.StartCPUProfile(f))
	burnDecode(t, time.Second)
	pprof.StopCPUProfile()
	require.NoError(t, f.Close())

	samples, err := profileSamples(path)
	require.NoError(t, err)
	require.NotEmpty(t, samples)
	b, err := newBreakdown("decode", 100, []string{path})
	require.NoError(t, err)
	// Under -race most samples are the race runtime's C code, with no Go
	// stack to sort ("other"); of the rest, decoding is most.
	named := b.total - b.byKind[otherKind]
	require.Positive(t, named, "kinds: %v", b.byKind)
	require.Greater(t, float64(b.byKind["decode (JSON)"])/float64(named), 0.5, "kinds: %v", b.byKind)
	for _, s := range samples {
		require.NotEmpty(t, s.frames)
		require.Positive(t, s.d)
	}
}

// The CPU time read from /proc for this process agrees with getrusage's
// (its own and its waited-for children's, as /proc counts them), to a few
// clock ticks.
func TestProcCPUMatchesRusage(t *testing.T) {
	burnDecode(t, 300*time.Millisecond)
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru))
	a, b := procCPU(os.Getpid()), selfCPU()+time.Duration(ru.Utime.Nano()+ru.Stime.Nano())
	require.Positive(t, a)
	require.InDelta(t, b.Seconds(), a.Seconds(), (5 * clockTick).Seconds())
}

// perf's comma-separated output is read as the sum of the sync calls.
func TestSyncCounterReadsPerfOutput(t *testing.T) {
	c := &syncCounter{}
	c.out.WriteString("12,,syscalls:sys_enter_fdatasync,100.00,,\n3,,syscalls:sys_enter_fsync,100.00,,\n")
	require.Equal(t, int64(15), c.count())
	c = &syncCounter{}
	c.out.WriteString("<not supported>,,syscalls:sys_enter_fdatasync,,,\n")
	require.Equal(t, int64(-1), c.count())
}

// perf script's blocks (period, then frames leaf first, kernel frames
// above the Go ones) are read as samples whose Go frames sort into kinds
// as a pprof profile's do.
func TestWhereReadsPerfScript(t *testing.T) {
	out := []byte(`    2004008 
	ffffffff8143ae09 futex_wake
	ffffffff81000130 entry_SYSCALL_64_after_hwframe
	           8fd03 syscall.Syscall.abi0
	          41d645 syscall.Fdatasync
	          41e55e go.etcd.io/bbolt.fdatasync
	           8e1c1 runtime.goexit.abi0

    2004008 
	          2abe87 encoding/json.(*decodeState).object
	          2c7b6e github.com/taskbridge/taskbridge/taskrouter.(*Router).handle

not a sample
`)
	samples := parsePerfScript(out)
	require.Len(t, samples, 2)
	require.Equal(t, 2004008*time.Nanosecond, samples[0].d)
	require.Equal(t, []string{"futex_wake", "entry_SYSCALL_64_after_hwframe", "syscall.Syscall", "syscall.Fdatasync", "go.etcd.io/bbolt.fdatasync", "runtime.goexit"}, samples[0].frames)
	require.Equal(t, "fsync (fdatasync/fsync)", kindOf(samples[0]))
	require.Equal(t, "decode (JSON)", kindOf(samples[1]))
}

// -where profiles every server with one profiler: perf for the bench's own
// servers too when perf is there, so that their columns compare with the
// examples'; -cpuprofile alone keeps pprof for the servers that serve it.
func TestWhereProfilesEveryServerWithOneProfiler(t *testing.T) {
	running := func(debug, perf bool) *proc {
		return &proc{cmd: &exec.Cmd{Process: &os.Process{Pid: os.Getpid()}}, debug: debug, perf: perf}
	}
	ours, example := running(true, false), running(false, true)
	require.Equal(t, "pprof", profilerOf("dir", ours))
	require.Equal(t, "perf", profilerOf("dir", example))
	require.Empty(t, profilerOf("", ours), "no profile without -cpuprofile or -where")
	require.Empty(t, profilerOf("dir", running(false, false)), "a server with neither pprof nor perf (the peer)")
	require.Empty(t, profilerOf("dir", group("g", "http://127.0.0.1:1/mcp", ours)), "a group is profiled through its members")

	oneProfiler(ours)
	if _, err := exec.LookPath("perf"); err != nil {
		require.Equal(t, "pprof", profilerOf("dir", ours), "no perf: pprof as before")
		return
	}
	require.Equal(t, "perf", profilerOf("dir", ours), "perf profiles the bench's own server too")
	require.True(t, ours.debug, "it still serves /debug/bench for the store's counters")
}

// A binary linked without its symbol table (go run's, -ldflags=-s) is
// told from one with it, which perf can name the functions of.
func TestWhereTellsABinaryWithoutSymbols(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ELF binaries, as perf profiles them, on Linux")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module symbols\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	for _, c := range []struct {
		flags string
		want  bool
	}{{"", true}, {"-s", false}} {
		bin := filepath.Join(dir, "bin"+c.flags)
		build := exec.Command("go", "build", "-ldflags="+c.flags, "-o", bin, ".")
		build.Dir = dir
		out, err := build.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, c.want, hasSymbolTable(bin), "ldflags %q", c.flags)
	}
	require.False(t, hasSymbolTable(filepath.Join(dir, "main.go")), "not an ELF file")
}

// The table's header names the profiler, and warns when its columns come
// from two.
func TestWhereNamesItsProfilers(t *testing.T) {
	perf := &breakdown{title: "a", profiler: "perf record at 499 Hz"}
	pp := &breakdown{title: "b", profiler: "pprof at 100 Hz"}
	require.Equal(t, "perf record at 499 Hz for every column", profilersOf([]*breakdown{perf, perf}))
	mixed := profilersOf([]*breakdown{perf, pp, perf})
	require.Contains(t, mixed, "perf record at 499 Hz for a, a; pprof at 100 Hz for b")
	require.Contains(t, mixed, "compare the columns of one profiler only")
}
