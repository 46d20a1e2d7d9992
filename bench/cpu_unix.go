//go:build unix

package main

import (
	"syscall"
	"time"
)

// selfCPU is this process's user+system CPU time (the load generator),
// to the microsecond.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
