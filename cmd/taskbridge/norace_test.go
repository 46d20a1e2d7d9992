//go:build !race

package main

// raceEnabled: the tests run without -race.
const raceEnabled = false
