//go:build linux

package main

import "syscall"

// replicaProcAttr puts a replica in a process group of its own and sends
// it SIGTERM when this process dies (a parent-death signal, Linux only).
func replicaProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
