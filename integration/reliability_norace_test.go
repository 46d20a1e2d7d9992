//go:build !race

package integration

// relRace reports whether this test binary runs under the race detector;
// the crash test then builds the server it kills with -race too.
const relRace = false
