//go:build race

package main

// raceEnabled: the tests run with -race, so the end-to-end binaries are
// built with it too (it reuses the test's compiled packages, and the
// real binaries then run under the race detector).
const raceEnabled = true
