package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// profiling writes a CPU profile of the server for every measured window
// on a bench server when `-cpuprofile DIR` is given (with perf on the
// example servers, which serve no profiles; the peer, Node, has none). Profiling costs the server a few percent of CPU, so the CPU per
// operation of a profiled run reads a little high.
var profiling profiler

type profiler struct {
	dir string // where profiles go; "" when not profiling
	row string // the row being measured, for the file names

	mu    sync.Mutex
	names map[string]int // file names used, for the round number
}

// start begins a CPU profile of t over l's window and returns a function
// that waits for it to end, writes it and returns its path ("" when
// nothing was profiled). The server's /debug/pprof/profile profiles for
// whole seconds: l.d rounded, at least one.
func (p *profiler) start(t *proc, l load) func() string {
	switch profilerOf(p.dir, t) {
	case "perf":
		return p.startPerf(t, l)
	case "":
		return func() string { return "" }
	}
	secs := max(1, int(l.d.Seconds()+0.5))
	path := p.path(t, l)
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, gerr := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", baseURL(t.url), secs))
		if gerr != nil {
			err = gerr
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
			return
		}
		f, ferr := os.Create(path)
		if ferr != nil {
			err = ferr
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return func() string {
		<-done
		if err != nil {
			fmt.Fprintf(os.Stderr, "  profile of %s: %v\n", t.name, err)
			return ""
		}
		return path
	}
}

// profilerOf is what profiles t's windows when profiles go to dir: "perf"
// (perf record) when t.perf is set, whether or not t serves
// /debug/pprof, "pprof" (its /debug/pprof/profile) for the bench's own
// servers otherwise, "" when nothing profiles it (no dir, a group, a
// server with neither).
func profilerOf(dir string, t *proc) string {
	switch {
	case dir == "" || t.pid() == 0:
		return ""
	case t.perf:
		return "perf"
	case t.debug:
		return "pprof"
	}
	return ""
}

// startPerf profiles a server (an example as shipped, which serves no
// /debug/pprof, or any server of -where) with `perf record -g` for l's
// window: Go keeps frame pointers, so perf walks the same stacks pprof
// would, kernel frames on top. profileSamples reads either kind of file.
func (p *profiler) startPerf(t *proc, l load) func() string {
	path := strings.TrimSuffix(p.path(t, l), ".pprof") + ".perf"
	cmd := exec.Command("perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(t.pid()), "-o", path, "--", "sleep", strconv.Itoa(max(1, int(l.d.Seconds()+0.5))))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "  profile of %s: perf: %v\n", t.name, err)
		return func() string { return "" }
	}
	return func() string {
		if err := cmd.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "  profile of %s: perf: %v: %s\n", t.name, err, bytes.TrimSpace(out.Bytes()))
			return ""
		}
		return path
	}
}

// path names the profile of l on t in row p.row, numbering rounds:
// row12-taskbridge_bbolt-task-c64-2.pprof.
func (p *profiler) path(t *proc, l load) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '=' || r == '-' {
			return r
		}
		return '_'
	}, t.name)
	base := fmt.Sprintf("row%s-%s-%s-c%d", p.row, clean, l.op, l.conc)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.names == nil {
		p.names = map[string]int{}
	}
	p.names[base]++
	return filepath.Join(p.dir, fmt.Sprintf("%s-%d.pprof", base, p.names[base]))
}
