// Package gcpolicy sets the garbage collector policy of taskbridge's own
// binaries (the examples and the bench server). The library never changes
// process-wide settings: a server author decides for their binary.
//
// go-sdk v1.8 allocates about 230 KB of short-lived garbage per request
// (a 32 KiB decoder buffer for every JSON unmarshal, several per request;
// see docs/PERFORMANCE.md), so with Go's default GOGC=100 a busy server
// spends a large share of its CPU collecting. Raising GOGC trades a few
// MiB of heap for that CPU. Apply sets DefaultGOGC unless the operator set
// GOGC in the environment, which always wins.
package gcpolicy

import (
	"os"
	"runtime/debug"
	"strconv"
)

// DefaultGOGC is the GOGC value the binaries use when the environment
// sets none.
const DefaultGOGC = 400

// Apply sets GOGC to DefaultGOGC unless the GOGC environment variable is
// set, and returns the value in effect ("off" when the collector is off).
func Apply() string {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return v
	}
	debug.SetGCPercent(DefaultGOGC)
	return strconv.Itoa(DefaultGOGC)
}
