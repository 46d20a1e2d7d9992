//go:build unix && !linux

package main

import "syscall"

// replicaProcAttr puts a replica in a process group of its own. Without a
// parent-death signal on this system, a replica outlives this process if
// it is killed (it is stopped in order on Ctrl-C and SIGTERM).
func replicaProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
