package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/taskbridge/taskbridge/store"
)

// The servers a user starts (issue 43): examples/conformance as the README
// runs it and example 62's serve, built from this checkout, with their
// shipped defaults (no TASKBRIDGE_* variable reaches them), each on its
// own bbolt file. They serve other tools than the bench server
// (conformanceTools, example62Tools) and no /debug/ endpoints: -where and
// -cpuprofile profile them with perf, and example 62's store counters are
// read from its /metrics.

// example is one example server the bench can start.
type example struct {
	name  string // in rows
	pkg   string // ./examples/...
	args  func(addr, db string) []string
	tools *toolSet
	// metrics is the path of its Prometheus endpoint, "" when it has none.
	metrics string
}

var (
	conformanceExample = example{name: "examples/conformance", pkg: "./examples/conformance", tools: conformanceTools,
		args: func(addr, db string) []string { return []string{"-http", addr, "-db", db} }}
	example62 = example{name: "example 62", pkg: "./examples/62_tasks_workflow", tools: example62Tools, metrics: "/metrics",
		args: func(addr, db string) []string { return []string{"serve", "-http", addr, "-db", db} }}
)

// moduleRoot finds the module's directory from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/taskbridge/taskbridge\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the taskbridge module was not found: run from the repository")
		}
		dir = parent
	}
}

// startExample builds e into tmp (once per run: go build's cache does the
// rest) and starts it on a free loopback port with its own bbolt file in
// tmp, then waits until it accepts connections.
func startExample(tmp string, e example) (*proc, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "bin", filepath.Base(e.pkg))
	if _, err := os.Stat(bin); err != nil {
		build := exec.Command("go", "build", "-o", bin, e.pkg)
		build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("building %s: %w", e.pkg, err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dir, err := os.MkdirTemp(tmp, filepath.Base(e.pkg)+"-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, e.args(addr, filepath.Join(dir, "tasks.db"))...)
	cmd.Dir = dir
	cmd.Env = shippedEnv()
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &proc{name: e.name + " (as shipped)", cmd: cmd, url: "http://" + addr + "/mcp", tools: e.tools, perf: true, waited: exited}
	if e.metrics != "" {
		p.metrics = "http://" + addr + e.metrics
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return p, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("%s exited before serving: %v: %s", e.name, err, bytes.TrimSpace(errs.Bytes()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not listen on %s within a minute", e.name, addr)
		}
	}
}

// freePort is a loopback port nothing listens on (for a server that takes
// its address as a flag and does not report the port it got).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// shippedEnv is this process's environment without TASKBRIDGE_*
// variables, so an example runs with the defaults it ships with.
func shippedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKBRIDGE_") {
			env = append(env, kv)
		}
	}
	return env
}

// metricsStats reads a store's counters from a Prometheus text page
// (taskbridge_store_*, package metrics); nil when the page has none.
func metricsStats(url string) *store.Stats {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var st store.Stats
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "taskbridge_store_commits_total":
			st.Commits, found = uint64(v), true
		case "taskbridge_store_commit_duration_seconds_sum":
			st.CommitTime = time.Duration(v * float64(time.Second))
		case "taskbridge_store_commit_writes_sum":
			st.OpsCommitted = uint64(v)
		case "taskbridge_store_commit_errors_total":
			st.CommitErrors = uint64(v)
		}
	}
	if !found {
		return nil
	}
	return &st
}
