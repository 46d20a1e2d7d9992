package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Allocations per task round trip at commit 1844222 (wave 2, before the
// fast path), measured with the same engine benchmark:
// BenchmarkTaskRoundTrip/memory, 3000 iterations (docs/PERFORMANCE.md).
const (
	baselineCommit = "1844222"
	baselineBytes  = 556738
	baselineAllocs = 389
)

var benchLine = regexp.MustCompile(`(?m)^BenchmarkTaskRoundTrip/memory\S*\s+\d+\s+[\d.]+ ns/op\s+(\d+) B/op\s+(\d+) allocs/op`)

// 8. Allocations per task round trip: the engine benchmark (a go-sdk
// server with the router and a raw JSON-RPC client in one process, over
// the in-memory transport, memory store), run with go test.
func allocations(rep *report) error {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkTaskRoundTrip$/^memory$", "-benchmem", "-benchtime", "3000x", "./taskrouter")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go test -bench: %w\n%s", err, out)
	}
	m := benchLine.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("no benchmark line in:\n%s", out)
	}
	b, _ := strconv.Atoi(string(m[1]))
	a, _ := strconv.Atoi(string(m[2]))
	rb, ra := float64(b)/baselineBytes, float64(a)/baselineAllocs
	rep.add(row{"8", "allocations per task round trip, bytes (engine benchmark, in-memory transport, server + client)",
		fmt.Sprintf("%d B", b), fmt.Sprintf("%d B at %s", baselineBytes, baselineCommit), fmt.Sprintf("%.2f", rb), "≤ 0.5", met(rb <= 0.5)})
	rep.add(row{"8", "allocations per task round trip, objects (same benchmark)",
		fmt.Sprintf("%d", a), fmt.Sprintf("%d at %s", baselineAllocs, baselineCommit), fmt.Sprintf("%.2f", ra), "≤ 0.5", met(ra <= 0.5)})
	return nil
}
