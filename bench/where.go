package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// `go run ./bench -where`: where the server's CPU time goes on a plain
// call and on a task round trip. It profiles taskbridge's bench server
// (bbolt), the example servers as shipped and the floor, all with perf
// when it is there (the examples serve no pprof), under the load
// generator (o.rounds windows of o.cpuDuration per column), sorts every
// profile sample into one kind of work by the functions on its stack, and
// prints each kind's share and its CPU time per operation (the share times
// the CPU per operation read from /proc in the same windows).

// kind is one kind of work a sample can be counted as: the first kind (in
// this order) any frame of the sample's stack belongs to. A frame belongs
// to a kind when its function name starts with one of the prefixes. The
// order decides overlaps: a collection assist inside decoding is GC,
// JSON written by the store is the store's, a wake-up inside the router
// is scheduling.
type kind struct {
	name     string
	prefixes []string
}

var kinds = []kind{
	{"fsync (fdatasync/fsync)", []string{"syscall.Fdatasync", "syscall.Fsync", "go.etcd.io/bbolt.fdatasync", "os.(*File).Sync"}},
	{"GC (marking, sweeping, assists)", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.gcDrain", "runtime.bgsweep",
		"runtime.sweepone", "runtime.bgscavenge", "runtime.markroot", "runtime.scanobject", "runtime.scanObject", "runtime.gcStart",
		"runtime.gcMarkDone", "runtime.gcMarkTermination", "runtime.greyobject", "runtime.wbBufFlush", "gcWriteBarrier",
		"runtime.gcmarknewobject", "runtime.(*mheap).reclaim", "runtime.deductSweepCredit", "internal/runtime/gc/"}},
	{"store (bbolt, the store's code)", []string{"go.etcd.io/bbolt.", "github.com/taskbridge/taskbridge/store", "github.com/jackc/"}},
	{"validation (JSON Schema)", []string{"github.com/google/jsonschema-go/"}},
	{"decode (JSON)", []string{"encoding/json.Unmarshal", "encoding/json.(*decodeState)", "encoding/json.(*Decoder)", "encoding/json.Valid",
		"encoding/json.checkValid", "github.com/segmentio/encoding/json.Unmarshal", "github.com/segmentio/encoding/json.Parse",
		"github.com/segmentio/encoding/json.(*Decoder)", "github.com/segmentio/encoding/json.decoder",
		"github.com/modelcontextprotocol/go-sdk/internal/json.Unmarshal", "github.com/modelcontextprotocol/go-sdk/internal/jsonrpc2.DecodeMessage"}},
	{"encode (JSON)", []string{"encoding/json.Marshal", "encoding/json.(*encodeState)", "encoding/json.(*Encoder)",
		"github.com/segmentio/encoding/json.Marshal", "github.com/segmentio/encoding/json.Append", "github.com/segmentio/encoding/json.(*Encoder)",
		"github.com/segmentio/encoding/json.encoder", "github.com/modelcontextprotocol/go-sdk/internal/jsonrpc2.EncodeMessage"}},
	{"network I/O (socket syscalls)", []string{"internal/poll.(*FD).Read", "internal/poll.(*FD).Write", "internal/poll.(*FD).Accept",
		"internal/poll.(*FD).Close", "net.(*conn)", "net.(*netFD)"}},
	{"scheduling (goroutines, wake-ups, locks, timers)", []string{"runtime.schedule", "runtime.findRunnable", "runtime.wakep", "runtime.startm",
		"runtime.stopm", "runtime.notewakeup", "runtime.notesleep", "runtime.futex", "runtime.park_m", "runtime.goready", "runtime.ready",
		"runtime.newproc", "runtime.goexit0", "runtime.newstack", "runtime.morestack", "runtime.copystack", "runtime.netpoll",
		"runtime.usleep", "runtime.osyield", "runtime.mcall", "runtime.gopark", "runtime.(*timer)", "runtime.(*timers)", "runtime.sysmon",
		"runtime.mstart", "runtime.semrelease", "runtime.semacquire", "runtime.lock", "runtime.unlock", "runtime.selectgo", "runtime.chansend", "runtime.chanrecv"}},
	{"go-sdk (dispatch, sessions, middleware)", []string{"github.com/modelcontextprotocol/go-sdk/"}},
	{"taskbridge (router, engine, fast path)", []string{"github.com/taskbridge/taskbridge/"}},
	{"net/http (server, headers)", []string{"net/http.", "net/textproto.", "bufio.", "net/url."}},
}

// shapes are the type arguments of a generic function's name.
var shapes = regexp.MustCompile(`\[go\.shape.*\]`)

// otherKind is every sample no kind claims: runtime and allocation
// outside the above, the bench's own tool handlers.
const otherKind = "other"

// sample is one stack of a CPU profile and the time it was seen.
type sample struct {
	d      time.Duration
	frames []string // leaf first
}

// profileSamples reads a CPU profile's stacks: a pprof file with `go
// tool pprof -traces`, a perf one (.perf) with `perf script`.
func profileSamples(path string) ([]sample, error) {
	if strings.HasSuffix(path, ".perf") {
		return perfSamples(path)
	}
	out, err := exec.Command("go", "tool", "pprof", "-traces", path).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -traces %s: %w", path, err)
	}
	var samples []sample
	var cur *sample
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			cur = nil
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if cur == nil && !strings.HasPrefix(line, " ") {
			continue // the header: File:, Type:, ...
		}
		fn := strings.TrimSuffix(strings.TrimSpace(line), " (inline)")
		if cur == nil {
			d, err := time.ParseDuration(f[0])
			if err != nil {
				continue // a label line, or the header
			}
			samples = append(samples, sample{d: d})
			cur = &samples[len(samples)-1]
			fn = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), f[0])), " (inline)")
		}
		cur.frames = append(cur.frames, fn)
	}
	return samples, sc.Err()
}

// perfSamples reads the stacks of a `perf record -g` file with `perf
// script`: one block per sample, its period then one frame a line (address,
// symbol), leaf first, kernel frames above the Go ones. Each sample counts
// as one period of the sampling clock.
func perfSamples(path string) ([]sample, error) {
	out, err := exec.Command("perf", "script", "-i", path, "-F", "period,ip,sym").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script -i %s: %w", path, err)
	}
	return parsePerfScript(out), nil
}

// parsePerfScript is perfSamples' reading of perf script's output.
func parsePerfScript(out []byte) []sample {
	var samples []sample
	for _, block := range bytes.Split(out, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(block)), "\n")
		if len(lines) < 2 {
			continue
		}
		period, err := strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64)
		if err != nil {
			continue
		}
		s := sample{d: time.Duration(period)}
		for _, line := range lines[1:] {
			_, fn, ok := strings.Cut(strings.TrimSpace(line), " ")
			if !ok {
				continue
			}
			s.frames = append(s.frames, strings.TrimSuffix(strings.TrimSpace(fn), ".abi0"))
		}
		samples = append(samples, s)
	}
	return samples
}

// kindOf is the kind a sample is counted as.
func kindOf(s sample) string {
	for _, k := range kinds {
		for _, fn := range s.frames {
			for _, p := range k.prefixes {
				if strings.HasPrefix(fn, p) {
					return k.name
				}
			}
		}
	}
	return otherKind
}

// breakdown is one column of the table: the profiled time by kind and by
// function (cumulative: every function on a sample's stack, once), and the
// CPU per operation read from /proc.
type breakdown struct {
	title  string
	cpu    float64 // µs per operation, median over the windows
	total  time.Duration
	byKind map[string]time.Duration
	byFunc map[string]time.Duration
	// profiler is what took the column's profiles.
	profiler string
}

func newBreakdown(title string, cpu float64, profiles []string) (*breakdown, error) {
	b := &breakdown{title: title, cpu: cpu, byKind: map[string]time.Duration{}, byFunc: map[string]time.Duration{}}
	for _, p := range profiles {
		samples, err := profileSamples(p)
		if err != nil {
			return nil, err
		}
		b.profiler = "pprof at 100 Hz"
		if strings.HasSuffix(p, ".perf") {
			b.profiler = "perf record at 499 Hz"
		}
		for _, s := range samples {
			b.total += s.d
			b.byKind[kindOf(s)] += s.d
			seen := map[string]bool{}
			for _, fn := range s.frames {
				if !seen[fn] {
					seen[fn] = true
					b.byFunc[fn] += s.d
				}
			}
		}
	}
	if b.total == 0 {
		return nil, fmt.Errorf("%s: the profiles hold no samples", title)
	}
	return b, nil
}

// share is d as a fraction of the column's profiled time.
func (b *breakdown) share(d time.Duration) float64 { return float64(d) / float64(b.total) }

// cell formats d as µs per operation and share.
func (b *breakdown) cell(d time.Duration) string {
	return fmt.Sprintf("%.0f µs (%.0f%%)", b.share(d)*b.cpu, 100*b.share(d))
}

// whereColumn is one profiled load: a server, an operation, a client count.
type whereColumn struct {
	title string
	srv   *proc
	op    string
	conc  int
}

func where(o options) error {
	tmp, err := os.MkdirTemp("", "taskbridge-where-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if bin, err := perfableSelf(tmp); err != nil {
		return err
	} else if bin != "" {
		// This binary has no symbol table (go run): the one built with
		// it measures instead, so that perf names its functions.
		cmd := exec.Command(bin, os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return cmd.Run()
	}
	if profiling.dir == "" {
		profiling.dir = tmp
	}
	profiling.row = "where"
	ours, err := startOurs("bbolt", filepath.Join(tmp, "where.db"))
	if err != nil {
		return err
	}
	defer ours.stop()
	ours.name = "taskbridge (bbolt)"
	fl, err := startFloor()
	if err != nil {
		return err
	}
	defer fl.stop()
	conf, err := startExample(tmp, conformanceExample)
	if err != nil {
		return err
	}
	defer conf.stop()
	ex62, err := startExample(tmp, example62)
	if err != nil {
		return err
	}
	defer ex62.stop()
	oneProfiler(ours, fl)
	cols := []whereColumn{
		{"taskbridge plain call, 64 clients", ours, "plain", 64},
		{"taskbridge task round trip, 64 clients", ours, "task", 64},
		{"taskbridge plain call, 1 client", ours, "plain", 1},
		{"taskbridge task round trip, 1 client", ours, "task", 1},
		{"examples/conformance plain call, 64 clients", conf, "plain", 64},
		{"examples/conformance task round trip, 64 clients", conf, "task", 64},
		{"example 62 plain call, 64 clients", ex62, "plain", 64},
		{"example 62 task round trip, 64 clients", ex62, "task", 64},
		{"floor plain call, 64 clients", fl, "plain", 64},
		{"floor task round trip, 64 clients", fl, "task", 64},
	}
	profiles := make([][]string, len(cols))
	cpus := make([][]float64, len(cols))
	for round := range o.rounds {
		for i, c := range cols {
			r, err := load{op: c.op, conc: c.conc, d: o.cpuDuration}.on(c.srv)
			if err != nil || r.errs > 0 {
				return fmt.Errorf("%s: %v %v", c.title, err, r.firstEr)
			}
			if r.profile == "" {
				return fmt.Errorf("%s: no profile", c.title)
			}
			profiles[i] = append(profiles[i], r.profile)
			cpus[i] = append(cpus[i], r.cpuPerOp())
			fmt.Fprintf(os.Stderr, "  round %d, %s: %.0f/s, %.0f µs server CPU per op\n", round+1, c.title, r.perSec(), r.cpuPerOp())
		}
	}
	var bs []*breakdown
	for i, c := range cols {
		b, err := newBreakdown(c.title, median(cpus[i]), profiles[i])
		if err != nil {
			return err
		}
		bs = append(bs, b)
	}
	fmt.Print(whereTable(o, bs))
	for _, i := range []int{1, 5, 7} { // the task round trips at 64 clients
		fmt.Print(topFunctions(bs[i], 25))
	}
	if profiling.dir != tmp {
		fmt.Printf("\nProfiles: %s (go tool pprof -top FILE ...)\n", profiling.dir)
	}
	return nil
}

// oneProfiler has perf profile the bench's own servers too when perf is
// there, as it profiles the examples: the columns must come from one
// profiler to compare. perf sees the kernel's side of a context switch
// (finish_task_switch), which pprof's samples miss: the same server read
// 5–7% scheduling by pprof and 13–16% by perf (docs/PERFORMANCE.md, issue
// 43), so a pprof column beside a perf one reads ~2.5× less scheduling
// and a few percent more of everything else.
func oneProfiler(servers ...*proc) {
	if _, err := exec.LookPath("perf"); err != nil {
		return
	}
	for _, s := range servers {
		s.perf = true
	}
}

// perfableSelf is "" when perf can profile this binary's servers, or
// perf is not there (pprof profiles them, oneProfiler), and otherwise the
// path of the bench built into dir with its symbol table: `go run` links
// without one, and perf reads every Go frame of such a binary as a bare
// address.
func perfableSelf(dir string) (string, error) {
	if _, err := exec.LookPath("perf"); err != nil {
		return "", nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if hasSymbolTable(self) {
		return "", nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bin", "bench")
	build := exec.Command("go", "build", "-o", bin, "./bench")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the bench with its symbol table for perf: %w", err)
	}
	return bin, nil
}

// hasSymbolTable says whether the ELF file at path has a symbol table.
func hasSymbolTable(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".symtab") != nil
}

// profilersOf names what profiled the columns bs: one profiler, or each
// with its columns and a warning, since perf reads ~2.5× the scheduling
// pprof does on the same server (oneProfiler).
func profilersOf(bs []*breakdown) string {
	var names []string
	cols := map[string][]string{}
	for _, b := range bs {
		if _, ok := cols[b.profiler]; !ok {
			names = append(names, b.profiler)
		}
		cols[b.profiler] = append(cols[b.profiler], b.title)
	}
	if len(names) == 1 {
		return names[0] + " for every column"
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " for " + strings.Join(cols[n], ", ")
	}
	return strings.Join(parts, "; ") + "; the profilers differ: compare the columns of one profiler only, scheduling above all"
}

// whereTable prints the kinds of work, one column per breakdown.
func whereTable(o options, bs []*breakdown) string {
	var w strings.Builder
	fmt.Fprintf(&w, "Where the server's CPU time goes, %s: CPU profiles of the server process (%s), %d windows of %s per column; µs per operation = the kind's share of the profile × the server's CPU per operation read from /proc in the same windows.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), profilersOf(bs), o.rounds, o.cpuDuration)
	w.WriteString("| kind of work |")
	for _, b := range bs {
		fmt.Fprintf(&w, " %s |", b.title)
	}
	w.WriteString("\n|---|")
	for range bs {
		w.WriteString("---|")
	}
	w.WriteString("\n")
	names := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		names = append(names, k.name)
	}
	for _, n := range append(names, otherKind) {
		fmt.Fprintf(&w, "| %s |", n)
		for _, b := range bs {
			fmt.Fprintf(&w, " %s |", b.cell(b.byKind[n]))
		}
		w.WriteString("\n")
	}
	w.WriteString("| **server CPU per operation** |")
	for _, b := range bs {
		fmt.Fprintf(&w, " **%.0f µs** |", b.cpu)
	}
	w.WriteString("\n")
	return w.String()
}

// topFunctions lists the functions of taskbridge, go-sdk and the JSON
// Schema validator with the most CPU time on their stacks (cumulative),
// per operation: where a cut would pay.
func topFunctions(b *breakdown, n int) string {
	type fn struct {
		name string
		d    time.Duration
	}
	var fns []fn
	for name, d := range b.byFunc {
		for _, p := range []string{"github.com/taskbridge/taskbridge/", "github.com/modelcontextprotocol/go-sdk/", "github.com/google/jsonschema-go/"} {
			if strings.HasPrefix(name, p) {
				fns = append(fns, fn{name, d})
				break
			}
		}
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].d > fns[j].d })
	var w strings.Builder
	fmt.Fprintf(&w, "\n%s: functions of taskbridge, go-sdk and jsonschema-go by CPU time on their stack (cumulative, µs per operation):\n\n| function | µs | share |\n|---|---|---|\n", b.title)
	for _, f := range fns[:min(n, len(fns))] {
		name := strings.NewReplacer("github.com/taskbridge/taskbridge/", "", "github.com/modelcontextprotocol/go-sdk/", "go-sdk/", "github.com/google/jsonschema-go/", "jsonschema-go/").Replace(shapes.ReplaceAllString(f.name, "[…]"))
		fmt.Fprintf(&w, "| %s | %.0f | %.0f%% |\n", name, b.share(f.d)*b.cpu, 100*b.share(f.d))
	}
	return w.String()
}
