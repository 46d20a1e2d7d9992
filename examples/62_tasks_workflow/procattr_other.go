//go:build !unix

package main

import "syscall"

// replicaProcAttr has nothing to set on this system: a Ctrl-C reaches the
// replicas too, and a replica outlives this process if it is killed.
func replicaProcAttr() *syscall.SysProcAttr { return nil }
