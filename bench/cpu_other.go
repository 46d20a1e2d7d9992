//go:build !unix

package main

import "time"

// selfCPU is 0 where getrusage does not exist: the bench reads CPU time
// from /proc and getrusage, so its CPU columns are Linux's (and other
// Unixes' for the load generator); elsewhere it still builds and measures
// wall time.
func selfCPU() time.Duration { return 0 }
